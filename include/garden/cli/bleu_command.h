// `garden bleu ...`: sacreBLEU-compatible corpus BLEU of a hypothesis file.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `bleu` subcommand to `app`:
//   bleu --hypothesis FILE --reference FILE [--reference FILE ...]
//        [--tokenize 13a|intl|none] [--lowercase]
// Files hold one UTF-8 sentence per line; every reference must have as many lines as
// the hypothesis. Prints sacreBLEU's line (see nlp::BleuScore::format) on stdout.
//
// Dispatch: call add_bleu_command(app) before app.parse(argc, argv); nothing else.
// The work runs in the subcommand's CLI11 callback during app.parse(). Failures
// (unreadable file, line-count mismatch, bad UTF-8) throw garden::Error with a one-line
// message out of app.parse(); a bad --tokenize value is a CLI::ParseError. Option
// storage lives in the callback, so `app` may outlive this call's stack frame.
CLI::App* add_bleu_command(CLI::App& app);

}  // namespace garden
