// Byte encodings the data layer needs in several places: base64 (bytes in
// JSON) and UTF-8 (tokenizers, BLEU, tf.Example JSON).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace garden {

// Standard, padded base64.
std::string base64_encode(std::string_view bytes);
// Strict: false for anything but padded standard base64.
bool base64_decode(std::string_view text, std::string& bytes);

namespace unicode {
// The offset of the first byte that does not start a valid UTF-8 sequence
// (overlong forms, surrogates and values past U+10FFFF are invalid), or
// std::string_view::npos when the whole text is valid.
std::size_t invalid_utf8_offset(std::string_view text);
// Empty when `text` is valid UTF-8; otherwise the first bad byte and its
// offset, for an error message: "invalid UTF-8 byte 0xE9 at offset 3".
std::string utf8_error(std::string_view text);
// Code points of `text`; each invalid byte decodes to U+FFFD.
std::vector<char32_t> decode_utf8(std::string_view text);
void append_utf8(char32_t cp, std::string& out);
}  // namespace unicode

}  // namespace garden
