#include "garden/base/encoding.h"

#include <cstdint>
#include <cstring>

namespace garden {

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The length of the valid UTF-8 sequence at p[i], storing its code point, or
// 0 when the bytes there are not one.
int decode_one(const unsigned char* p, std::size_t n, std::size_t i, char32_t& cp) {
  const unsigned char b = p[i];
  int len = 0;
  char32_t min = 0;
  if (b < 0x80) {
    cp = b;
    return 1;
  } else if ((b & 0xE0) == 0xC0) {
    len = 2, cp = b & 0x1F, min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3, cp = b & 0x0F, min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4, cp = b & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + static_cast<std::size_t>(len) > n) return 0;
  for (int k = 1; k < len; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i + k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << 16;
    if (i + 1 < in.size()) n |= static_cast<uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out.push_back(kBase64[(n >> 18) & 63]);
    out.push_back(kBase64[(n >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kBase64[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < in.size() ? kBase64[n & 63] : '=');
  }
  return out;
}

bool base64_decode(std::string_view in, std::string& out) {
  if (in.size() % 4 != 0) return false;
  out.clear();
  for (std::size_t i = 0; i < in.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const char c = in[i + j];
      int v;
      if (c == '=' && i + 4 == in.size() && j >= 2) {
        v = 0;
        ++pad;
      } else {
        if (pad > 0) return false;  // data after padding
        const char* at = c == '\0' ? nullptr : std::strchr(kBase64, c);
        if (at == nullptr) return false;
        v = static_cast<int>(at - kBase64);
      }
      n = (n << 6) | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>((n >> 16) & 0xFF));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return true;
}

namespace unicode {

std::size_t invalid_utf8_offset(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  char32_t cp = 0;
  for (std::size_t i = 0; i < text.size();) {
    const int len = decode_one(p, text.size(), i, cp);
    if (len == 0) return i;
    i += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

std::string utf8_error(std::string_view text) {
  const std::size_t bad = invalid_utf8_offset(text);
  if (bad == std::string_view::npos) return "";
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto byte = static_cast<unsigned char>(text[bad]);
  return std::string("invalid UTF-8 byte 0x") + kHex[byte >> 4] + kHex[byte & 15] + " at offset " +
         std::to_string(bad);
}

std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const int len = decode_one(p, text.size(), i, cp);
    if (len == 0) {
      out.push_back(0xFFFD);  // one replacement per bad byte, then resync
      ++i;
    } else {
      out.push_back(cp);
      i += static_cast<std::size_t>(len);
    }
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace unicode
}  // namespace garden
