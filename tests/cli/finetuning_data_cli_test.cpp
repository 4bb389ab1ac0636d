// `garden create_finetuning_data` as a user meets it: Model Garden's flags
// on the bundled SpamAssassin subjects, the records and meta data in the
// files named, and on an error one line and no output file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_fixture.h"
#include "reference_formats.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliRun;
using garden_test::expect_one_error_line;
using garden_test::slurp;
using garden_test::spit;

class FinetuningDataCliTest : public garden_test::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    spit(dir_ / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nre\n:\nfree\nthe\n");
  }
  std::string flags(const std::string& input_dir, const std::string& task = "SST-2") const {
    return "create_finetuning_data --classification_task_name=" + task + " --input_data_dir='" +
           input_dir + "' --train_data_output_path='" + path("train.tfrecord") +
           "' --eval_data_output_path='" + path("eval.tfrecord") + "' --meta_data_file_path='" +
           path("meta.json") + "' --vocab_file='" + path("vocab.txt") + "' --max_seq_length=32";
  }
};

TEST_F(FinetuningDataCliTest, TheBundledSubjectsBecomeRecordsAndMetaData) {
  const CliRun run = garden(flags(std::string(GARDEN_SOURCE_DIR) + "/data/sentence_prediction"));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("train records: 2000"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("eval records:  500"), std::string::npos) << run.out;
  EXPECT_EQ(garden_test::reference::read_records(path("train.tfrecord")).size(), 2000u);
  EXPECT_EQ(garden_test::reference::read_records(path("eval.tfrecord")).size(), 500u);
  const auto meta = nlohmann::json::parse(slurp(dir_ / "meta.json"));
  EXPECT_EQ(meta.at("processor_type"), "SST-2");
  EXPECT_EQ(meta.at("num_labels"), 2);
  EXPECT_EQ(meta.at("max_seq_length"), 32);
}

TEST_F(FinetuningDataCliTest, ErrorsAreOneLineAndLeaveNoOutput) {
  fs::create_directories(dir_ / "glue");
  spit(dir_ / "glue" / "train.tsv", "sentence\tlabel\nfree the\t1\nre : the\tham\n");
  spit(dir_ / "glue" / "dev.tsv", "sentence\tlabel\nthe\t0\n");
  expect_one_error_line(garden(flags(path("glue"))),
                        {path("glue") + "/train.tsv:3, column 2: label 'ham' is not one of 0, 1"});
  EXPECT_FALSE(fs::exists(path("train.tfrecord")));
  EXPECT_FALSE(fs::exists(path("meta.json")));
  expect_one_error_line(garden(flags(path("absent"))), {"absent/train.tsv"});
  expect_one_error_line(garden(flags(path("glue")) + " --fine_tuning_task_type=retrieval"),
                        {"--fine_tuning_task_type=retrieval is not implemented yet"});
  expect_one_error_line(garden(flags(path("glue"), "GLUE")),
                        {"--classification_task_name 'GLUE' is not one of"});
  EXPECT_FALSE(fs::exists(path("eval.tfrecord")));
}

TEST_F(FinetuningDataCliTest, TheBundledSquadQuestionsBecomeWindowsAndBadJsonOneLine) {
  const std::string squad = std::string(GARDEN_SOURCE_DIR) + "/data/squad/train.json";
  const std::string common = " --train_data_output_path='" + path("squad.tfrecord") +
                             "' --meta_data_file_path='" + path("squad.json") + "' --vocab_file='" +
                             path("vocab.txt") +
                             "' --max_seq_length=64 --max_query_length=16 --doc_stride=32";
  const CliRun run = garden(
      "create_finetuning_data --fine_tuning_task_type=squad "
      "--squad_data_file='" +
      squad + "'" + common);
  ASSERT_EQ(run.status, 0) << run.err;
  const auto meta = nlohmann::json::parse(slurp(dir_ / "squad.json"));
  EXPECT_EQ(meta.at("task_type"), "bert_squad");
  EXPECT_EQ(meta.at("questions"), 1500);
  EXPECT_EQ(meta.at("skipped_questions"), 0);
  const auto records = garden_test::reference::read_records(path("squad.tfrecord"));
  // Paragraphs longer than a window make several: more windows than questions.
  EXPECT_GT(records.size(), 1500u);
  EXPECT_EQ(meta.at("train_data_size"), records.size());
  EXPECT_NE(run.out.find("train records: " + std::to_string(records.size())), std::string::npos);
  spit(dir_ / "bad.json", "{\"data\": [\n  {\"paragraphs\": 3}\n]}\n");
  fs::remove(path("squad.tfrecord"));
  expect_one_error_line(garden("create_finetuning_data --fine_tuning_task_type=squad "
                               "--squad_data_file='" +
                               path("bad.json") + "'" + common),
                        {path("bad.json") + ": data[0].paragraphs must be a list, not number"});
  EXPECT_FALSE(fs::exists(path("squad.tfrecord")));
  // A flag of another task type would be ignored: refused, naming its type.
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=squad --squad_data_file='" + squad +
             "' --label_list=O,B-X" + common),
      {"--label_list applies to tagging, not to --fine_tuning_task_type=squad"});
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=squad --squad_data_file='" + squad +
             "' --input_data_dir='" + path("") + "'" + common),
      {"--input_data_dir applies to classification, regression and tagging"});
  expect_one_error_line(garden("create_finetuning_data --fine_tuning_task_type=tagging "
                               "--input_data_dir='" +
                               path("") +
                               "' --max_seq_length=64 --max_query_length=16 "
                               "--doc_stride=32 --train_data_output_path='" +
                               path("squad.tfrecord") + "' --meta_data_file_path='" +
                               path("squad.json") + "' --vocab_file='" + path("vocab.txt") + "'"),
                        {"--doc_stride applies to squad, not to --fine_tuning_task_type=tagging"});
  EXPECT_FALSE(fs::exists(path("squad.tfrecord")));
}

// An output path that names an input (itself, through a link, or another
// output) is refused in one line before anything is read or written, for
// every task type; the inputs are left as they were.
TEST_F(FinetuningDataCliTest, AnOutputNamingAnInputIsRefusedAndTheInputKept) {
  fs::create_directories(dir_ / "glue");
  const std::string train = "sentence\tlabel\nfree the\t1\n";
  spit(dir_ / "glue" / "train.tsv", train);
  spit(dir_ / "glue" / "dev.tsv", "sentence\tlabel\nthe\t0\n");
  fs::create_symlink(dir_ / "glue" / "dev.tsv", dir_ / "dev_link.tsv");
  const std::string glue = " --classification_task_name=SST-2 --input_data_dir='" + path("glue") +
                           "' --vocab_file='" + path("vocab.txt") + "' --max_seq_length=32";
  const auto outputs = [&](const std::string& train_out, const std::string& eval_out,
                           const std::string& meta) {
    return " --train_data_output_path='" + train_out + "'" +
           (eval_out.empty() ? "" : " --eval_data_output_path='" + eval_out + "'") +
           " --meta_data_file_path='" + meta + "'";
  };
  expect_one_error_line(
      garden("create_finetuning_data" + glue +
             outputs(path("glue/train.tsv"), path("eval.tfrecord"), path("meta.json"))),
      {"--train_data_output_path '" + path("glue/train.tsv") +
       "' is the same file as --input_data_dir's train.tsv"});
  expect_one_error_line(
      garden("create_finetuning_data" + glue +
             outputs(path("train.tfrecord"), path("dev_link.tsv"), path("meta.json"))),
      {"--eval_data_output_path '" + path("dev_link.tsv") +
       "' is the same file as --input_data_dir's dev.tsv"});
  expect_one_error_line(
      garden("create_finetuning_data" + glue +
             outputs(path("train.tfrecord"), path("eval.tfrecord"), path("vocab.txt"))),
      {"--meta_data_file_path '" + path("vocab.txt") + "' is the same file as --vocab_file"});
  expect_one_error_line(
      garden("create_finetuning_data" + glue +
             outputs(path("train.tfrecord"), path("./train.tfrecord"), path("meta.json"))),
      {"--eval_data_output_path '" + path("./train.tfrecord") +
       "' is the same file as --train_data_output_path"});
  EXPECT_EQ(slurp(dir_ / "glue" / "train.tsv"), train);
  EXPECT_EQ(slurp(dir_ / "glue" / "dev.tsv"), "sentence\tlabel\nthe\t0\n");
  EXPECT_FALSE(fs::exists(path("train.tfrecord")));
  EXPECT_FALSE(fs::exists(path("meta.json")));

  // Tagging and SQuAD name their own files.
  fs::create_directories(dir_ / "panx");
  spit(dir_ / "panx" / "train-en.tsv", "free\tO\n\n");
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=tagging --input_data_dir='" +
             path("panx") + "' --vocab_file='" + path("vocab.txt") + "'" +
             outputs(path("panx/train-en.tsv"), "", path("meta.json"))),
      {"--train_data_output_path '" + path("panx/train-en.tsv") +
       "' is the same file as --input_data_dir's train-en.tsv"});
  EXPECT_EQ(slurp(dir_ / "panx" / "train-en.tsv"), "free\tO\n\n");
  spit(dir_ / "squad.json", "{\"data\": []}\n");
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=squad --squad_data_file='" +
             path("squad.json") + "' --vocab_file='" + path("vocab.txt") + "'" +
             outputs(path("train.tfrecord"), "", path("squad.json"))),
      {"--meta_data_file_path '" + path("squad.json") + "' is the same file as --squad_data_file"});
  EXPECT_EQ(slurp(dir_ / "squad.json"), "{\"data\": []}\n");
}

TEST_F(FinetuningDataCliTest, Conll2003FilesWithTestRecordsAndAnyTagSetWithLabelList) {
  fs::create_directories(dir_ / "conll");
  // IOB1 as distributed: "re" starts a MISC entity, so it becomes B-MISC.
  spit(dir_ / "conll" / "eng.train", "-DOCSTART- -X- -X- O\n\nre NN I-NP I-MISC\n: : O O\n\n");
  spit(dir_ / "conll" / "eng.testa", "free JJ I-NP O\n");
  spit(dir_ / "conll" / "eng.testb", "the DT I-NP I-ORG\nthe DT I-NP B-ORG\n");
  const std::string common =
      " --input_data_dir='" + path("conll") + "' --train_data_output_path='" +
      path("train.tfrecord") + "' --eval_data_output_path='" + path("eval.tfrecord") +
      "' --test_data_output_path='" + path("test.tfrecord") + "' --meta_data_file_path='" +
      path("meta.json") + "' --vocab_file='" + path("vocab.txt") + "' --max_seq_length=8";
  const CliRun run = garden(
      "create_finetuning_data --fine_tuning_task_type=tagging --tagging_task_name=conll2003" +
      common);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("test records:  1"), std::string::npos) << run.out;
  const auto meta = nlohmann::json::parse(slurp(dir_ / "meta.json"));
  EXPECT_EQ(meta.at("label_list").size(), 9u);
  EXPECT_EQ(meta.at("test_data_size"), 1);
  // B-ORG 3 twice: the second ORG right after the first.
  EXPECT_EQ(garden_test::reference::ref_parse_example(
                garden_test::reference::read_records(path("test.tfrecord"))[0])["label_ids"]
                .ints,
            (std::vector<int64_t>{-1, 3, 3, -1, -1, -1, -1, -1}));

  // Any tag set: --label_list orders the labels; one outside it is one line.
  const CliRun listed = garden(
      "create_finetuning_data --fine_tuning_task_type=tagging --tagging_task_name=conll "
      "--label_list=O,I-MISC,B-ORG,I-ORG" +
      common);
  ASSERT_EQ(listed.status, 0) << listed.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "meta.json")).at("label_list"),
            nlohmann::json({"O", "I-MISC", "B-ORG", "I-ORG"}));
  fs::remove(path("train.tfrecord"));
  fs::remove(path("meta.json"));
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=tagging --tagging_task_name=conll "
             "--label_list=O,I-MISC" +
             common),
      {path("conll") + "/eng.testb:1, column 4: label 'I-ORG' is not in the label list "
                       "(--label_list: O, I-MISC)"});
  EXPECT_FALSE(fs::exists(path("train.tfrecord")));
  EXPECT_FALSE(fs::exists(path("meta.json")));
  expect_one_error_line(
      garden("create_finetuning_data --fine_tuning_task_type=tagging --tagging_task_name=ner" +
             common),
      {"--tagging_task_name 'ner' is not one of panx, udpos, conll2003, conll"});
}

}  // namespace
