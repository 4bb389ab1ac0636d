// The C interface of libgarden_sentencepiece, the module through which
// Garden uses Debian's libsentencepiece.
//
// Why a module: Debian builds libsentencepiece with a bundled protobuf 3.14
// whose symbols it exports. In a process that also has the system protobuf
// 3.21 (LibTorch and Garden load it), the library's protobuf calls would bind
// to 3.21 and abort ("compiled against version 3.14.0"). libgarden loads this
// module with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so the module and
// libsentencepiece resolve their symbols in their own scope first.
//
// Only C types cross the boundary. Every buffer a function returns comes
// from malloc and is the caller's to free(); on failure a function returns
// non-zero (or NULL) and sets *error to a malloc'd message.
#ifndef GARDEN_MODULES_SENTENCEPIECE_GARDEN_SPM_H_
#define GARDEN_MODULES_SENTENCEPIECE_GARDEN_SPM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Frees a buffer this module returned (its own libc's free).
void garden_spm_free(void* buffer);

// SentencePieceTrainer::Train with a flag string ("--input=a --vocab_size=8").
int garden_spm_train(const char* flags, char** error);

// A loaded SentencePieceProcessor, or NULL.
void* garden_spm_load(const char* model_path, char** error);
void garden_spm_unload(void* processor);

// Ids of `text`: *ids holds *count ints.
int garden_spm_encode_ids(void* processor, const char* text, size_t length, int** ids,
                          size_t* count, char** error);
// Pieces of `text`: *pieces holds *count NUL-terminated pieces back to back.
int garden_spm_encode_pieces(void* processor, const char* text, size_t length, char** pieces,
                             size_t* count, char** error);
// Text of `count` ids; *text is NUL-terminated.
int garden_spm_decode_ids(void* processor, const int* ids, size_t count, char** text,
                          char** error);
// Text of `count` pieces; *text is NUL-terminated.
int garden_spm_decode_pieces(void* processor, const char* const* pieces, size_t count,
                             char** text, char** error);

#ifdef __cplusplus
}
#endif

#endif  // GARDEN_MODULES_SENTENCEPIECE_GARDEN_SPM_H_
