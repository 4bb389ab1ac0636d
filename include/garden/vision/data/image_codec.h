// Image files in memory: JPEG (libjpeg-turbo) and PNG (libpng) decoded to
// 8-bit pixels, as tf.io.decode_image decodes them for Model Garden's
// classification input, and encoded for the data tools (MNIST digits become
// PNG records) and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "garden/base/error.h"

namespace garden::vision {

// A file that is not a JPEG or PNG, or whose data is damaged. The message is
// one line naming the source (a file or record) given to the decoder.
class ImageError : public Error {
 public:
  using Error::Error;
};

enum class ImageFormat { kUnknown, kJpeg, kPng };

// From the leading bytes (JPEG: FF D8 FF; PNG: its 8-byte signature).
ImageFormat sniff_image_format(std::string_view bytes);
// "jpeg", "png" (the values of Model Garden's image/format feature), "".
const char* image_format_name(ImageFormat format);

// Pixels in height x width x channels order (HWC), row by row.
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;  // 1 (gray), 3 (RGB) or, for encode_jpeg only, 4 (CMYK)
  std::vector<uint8_t> pixels;

  uint8_t at(int64_t y, int64_t x, int64_t c) const {
    return pixels[static_cast<std::size_t>((y * width + x) * channels + c)];
  }
};

// Decodes a JPEG or PNG. channels: 0 keeps the file's own (1 for gray, 3
// for color; a PNG's alpha is dropped), 1 converts to gray, 3 to RGB (gray
// replicated), as tf.io.decode_image's `channels`. CMYK and YCCK JPEGs are
// converted to RGB as TensorFlow does (Adobe's inverted values when the
// file has Adobe's marker); 16-bit PNGs are scaled to 8 bits. A truncated or
// corrupt file is an error (TensorFlow's try_recover_truncated is false),
// naming `source`.
// An image of more than kMaxImagePixels (Pillow's limit for a
// decompression bomb) is refused from its header, before any decoding.
Image decode_image(std::string_view bytes, int channels, const std::string& source);
constexpr int64_t kMaxImagePixels = 178956970;

// The file's dimensions and format without decoding the pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;  // as decode_image with channels 0 would give
};
ImageInfo read_image_info(std::string_view bytes, const std::string& source);

// PNG of a 1- or 3-channel image, 8 bits (lossless).
std::string encode_png(const Image& image);
// Baseline JPEG at quality 1..100 of a 1-, 3- or 4-channel (CMYK, written
// with Adobe's marker, values as given) image, 4:4:4 at quality >= 90.
std::string encode_jpeg(const Image& image, int quality);

}  // namespace garden::vision
