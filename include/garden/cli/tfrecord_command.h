// `garden tfrecord ...`: inspect and write TFRecord files of tf.Example records.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `tfrecord` subcommand to `app`, with
//   tfrecord cat FILE [--limit N] [--compression_type GZIP|ZLIB] [--skip_corrupt]
//       each record's tf.Example as one JSON line on stdout (see example_to_json)
//   tfrecord count FILE... [--compression_type ...] [--skip_corrupt]
//       "count<TAB>path" per file, then "total<TAB>count"
//   tfrecord write --from FILE.jsonl --to FILE.tfrecord [--compression_type ...]
//       one tf.Example per non-blank JSON line (see example_from_json), written to a
//       temporary file renamed over --to on success only; --to the same file as
//       --from (links resolved) is refused
// Every input file is checked first (missing, a directory): one line naming it.
//
// Dispatch: call add_tfrecord_command(app) before app.parse(argc, argv); nothing else.
// The work runs in CLI11 callbacks during app.parse(), after all options are parsed.
// Failures throw garden::data::DataError (a std::runtime_error, one-line message) out
// of app.parse(): catch CLI::ParseError first (usage errors), then std::exception,
// print, and exit non-zero. The returned `tfrecord` subcommand's parsed() tells whether
// it ran (it needs one of cat / count / write). Option storage lives in the callbacks,
// so `app` may outlive this call's stack frame.
CLI::App* add_tfrecord_command(CLI::App& app);

}  // namespace garden
