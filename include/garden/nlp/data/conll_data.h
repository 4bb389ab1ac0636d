// Tagging data in CoNLL's column layout: one word a line, columns separated
// by spaces or tabs with the tag in the last column, a blank line between
// sentences, `-DOCSTART-` lines skipped (each ends a sentence). CoNLL-2003
// (`word POS chunk NER`, IOB1 tags as distributed, read as IOB2) and any
// other tag set, its labels taken from the training file or --label_list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "garden/nlp/data/classifier_data.h"
#include "garden/nlp/data/tagging_data.h"

namespace garden::nlp {

// One sentence as its file writes it; `lines` holds each word's line.
struct TaggedSentence {
  std::vector<std::string> words, tags;
  std::vector<int64_t> lines;
  int64_t tag_column = 0;  // 1-based: the last column
};

// The sentences of `path`. `columns` > 0: every line has exactly that many
// columns; 0: at least two, and every line as many as the file's first. A
// line otherwise, or one that is not UTF-8, is one garden::Error naming the
// file and the line.
std::vector<TaggedSentence> read_column_sentences(const std::string& path, int64_t columns);

// IOB1 -> IOB2, as seqeval's strict IOB2 scheme reads entities: an I-T that
// does not continue a T (first in the sentence, after O, after another
// type) becomes B-T; every other tag is kept, so IOB2 comes out unchanged.
// Expects O, B-T and I-T only (check_iob_tag).
std::vector<std::string> iob1_to_iob2(const std::vector<std::string>& tags);

// Throws garden::Error "WHERE: tag 'T' ..." unless `tag` is O, or B- or I-
// followed by one of `types` (any type when `types` is empty).
void check_iob_tag(const std::string& tag, const std::vector<std::string>& types,
                   const std::string& where);

// The tags of the sentences, each once: sorted, "O" first.
std::vector<std::string> labels_of(const std::vector<TaggedSentence>& sentences);

// --label_list: comma-separated labels, none empty, none twice.
std::vector<std::string> parse_label_list(const std::string& text);

// The labels of Hugging Face's conll2003 dataset, in its ner_tags order: O,
// B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, B-MISC, I-MISC.
const std::vector<std::string>& conll2003_labels();

// The file of one split in `dir`: exactly one of `candidates` must exist
// (e.g. train.txt, eng.train, train-en.tsv); throws naming the split and
// what was looked for, or the two found.
std::string find_split_file(const std::string& dir, const std::string& split,
                            const std::vector<std::string>& candidates);

// A tagging data set read and labelled: train always, dev and test when
// their outputs are asked for.
struct TaggingSplits {
  std::vector<std::string> labels;
  std::vector<TaggingExample> train, dev, test;
};

// --tagging_task_name=conll2003 (4 columns, IOB1 or IOB2 tags of PER, ORG,
// LOC, MISC, converted to IOB2; conll2003_labels) or conll (any column count
// and tag set, tags as written; the labels of the training file or
// options.label_list). Files in input_data_dir: train.txt | eng.train |
// train-en.tsv, valid.txt | dev.txt | eng.testa | dev-en.tsv, test.txt |
// eng.testb | test-en.tsv. A label outside the list is one garden::Error
// naming the file, the line and the label.
TaggingSplits read_conll_splits(const FinetuningDataOptions& options);

}  // namespace garden::nlp
