#include "garden/vision/data/image_codec.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// libjpeg's headers need FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

namespace garden::vision {

namespace {

constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// ITU-R BT.601 luma, as tf.image.rgb_to_grayscale weighs the channels.
uint8_t luma(int r, int g, int b) {
  const double y = 0.2989 * r + 0.5870 * g + 0.1140 * b;
  return static_cast<uint8_t>(y + 0.5 > 255 ? 255 : y + 0.5);
}

// `from` (1 or 3 channels) to `channels` (0: as it is, 1 or 3).
void convert_channels(Image& image, int channels) {
  if (channels == 0 || channels == image.channels) return;
  const std::size_t count = static_cast<std::size_t>(image.height * image.width);
  std::vector<uint8_t> out(count * static_cast<std::size_t>(channels));
  const uint8_t* in = image.pixels.data();
  if (channels == 3) {  // gray -> RGB
    for (std::size_t i = 0; i < count; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[i];
  } else {  // RGB -> gray
    for (std::size_t i = 0; i < count; ++i) out[i] = luma(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
  }
  image.pixels = std::move(out);
  image.channels = channels;
}

void check_channels(int channels) {
  if (channels != 0 && channels != 1 && channels != 3)
    throw Error("decode_image: channels must be 0, 1 or 3, got " + std::to_string(channels));
}

// ---- JPEG ---------------------------------------------------------------------------
// libjpeg reports a fatal error by calling error_exit, which must not
// return: it jumps back to the setjmp in the function that started the
// work. Those functions keep only trivially destructible locals between the
// setjmp and the end of the libjpeg calls.

struct JpegErrors {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void jpeg_fail(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings: a file that ends early is an error, as for TensorFlow without
// try_recover_truncated; other recoverable damage (extraneous bytes before
// a marker) decodes, as TensorFlow decodes it.
void jpeg_warn(j_common_ptr info, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF && !errors->truncated) {
    errors->truncated = true;
    (*info->err->format_message)(info, errors->message);
  }
}

void init_jpeg_errors(JpegErrors& errors) {
  jpeg_std_error(&errors.base);
  errors.base.error_exit = jpeg_fail;
  errors.base.emit_message = jpeg_warn;
  errors.message[0] = '\0';
  errors.truncated = false;
}

// Fills `image` (its vector exists before the setjmp) and returns "" or the
// error message.
std::string decode_jpeg_pixels(std::string_view bytes, bool gray, Image& image, bool header_only) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  init_jpeg_errors(errors);
  info.err = &errors.base;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    return errors.message;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  const bool file_gray = info.jpeg_color_space == JCS_GRAYSCALE;
  image.height = info.image_height;
  image.width = info.image_width;
  image.channels = file_gray ? 1 : 3;
  if (header_only) {
    jpeg_destroy_decompress(&info);
    return "";
  }
  info.out_color_space = cmyk ? JCS_CMYK : (gray || file_gray) ? JCS_GRAYSCALE : JCS_RGB;
  info.dct_method = JDCT_ISLOW;  // TensorFlow's default
  jpeg_start_decompress(&info);
  const int components = info.output_components;
  const std::size_t row_bytes = static_cast<std::size_t>(info.output_width) * components;
  image.pixels.resize(row_bytes * info.output_height);
  while (info.output_scanline < info.output_height && !errors.truncated) {
    JSAMPROW row = image.pixels.data() + row_bytes * info.output_scanline;
    jpeg_read_scanlines(&info, &row, 1);
  }
  if (errors.truncated) {
    jpeg_destroy_decompress(&info);
    return errors.message;
  }
  jpeg_finish_decompress(&info);
  const bool adobe = info.saw_Adobe_marker;
  jpeg_destroy_decompress(&info);
  if (errors.truncated) return errors.message;
  if (cmyk) {
    // CMYK -> RGB as TensorFlow's decoder: Adobe's files store the values
    // inverted.
    const std::size_t count = static_cast<std::size_t>(image.height * image.width);
    uint8_t* p = image.pixels.data();
    for (std::size_t i = 0; i < count; ++i) {
      const int c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
      if (adobe) {
        p[3 * i] = static_cast<uint8_t>(c * k / 255);
        p[3 * i + 1] = static_cast<uint8_t>(m * k / 255);
        p[3 * i + 2] = static_cast<uint8_t>(y * k / 255);
      } else {
        p[3 * i] = static_cast<uint8_t>((255 - c) * (255 - k) / 255);
        p[3 * i + 1] = static_cast<uint8_t>((255 - m) * (255 - k) / 255);
        p[3 * i + 2] = static_cast<uint8_t>((255 - y) * (255 - k) / 255);
      }
    }
    image.pixels.resize(count * 3);
    image.channels = 3;
  } else {
    image.channels = components;
  }
  return "";
}

std::string encode_jpeg_bytes(const Image& image, int quality, std::string& out) {
  jpeg_compress_struct info;
  JpegErrors errors;
  init_jpeg_errors(errors);
  info.err = &errors.base;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  if (setjmp(errors.jump)) {
    jpeg_destroy_compress(&info);
    std::free(buffer);
    return errors.message;
  }
  jpeg_create_compress(&info);
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(image.width);
  info.image_height = static_cast<JDIMENSION>(image.height);
  info.input_components = static_cast<int>(image.channels);
  info.in_color_space = image.channels == 1   ? JCS_GRAYSCALE
                        : image.channels == 3 ? JCS_RGB
                                              : JCS_CMYK;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  if (quality >= 90)
    for (int c = 0; c < info.num_components; ++c)
      info.comp_info[c].h_samp_factor = info.comp_info[c].v_samp_factor = 1;
  jpeg_start_compress(&info, TRUE);
  const std::size_t row_bytes = static_cast<std::size_t>(image.width * image.channels);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) + row_bytes * info.next_scanline;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  out.assign(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  return "";
}

// ---- PNG ---------------------------------------------------------------------------
// Decoding by libpng's own API, which reads 16-bit samples as stored (the
// simplified API would take them for linear light and re-encode them):
// palette and low-bit gray expanded to 8 bits, 16 bits cut to their high
// byte and alpha stripped, as TensorFlow's decode_png. Errors jump back to
// the setjmp, as for libjpeg.

struct PngReader {
  const unsigned char* data;
  std::size_t size;
  std::size_t position;
  char message[200];
};

void png_read_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* reader = static_cast<PngReader*>(png_get_io_ptr(png));
  if (reader->size - reader->position < length) png_error(png, "the file ends early");
  std::memcpy(out, reader->data + reader->position, length);
  reader->position += length;
}

[[noreturn]] void png_fail(png_structp png, png_const_charp message) {
  auto* reader = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof reader->message, "%s", message);
  std::longjmp(png_jmpbuf(png), 1);
}

void png_warn(png_structp, png_const_charp) {}

// Fills `image` (its vector exists before the setjmp); returns "" or the
// error message.
std::string decode_png_pixels(std::string_view bytes, Image& image, bool header_only) {
  PngReader reader{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 0, ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_fail, png_warn);
  if (!png) return "libpng could not start";
  png_infop info = png_create_info_struct(png);
  // Exists before the setjmp, so nothing it owns leaks on an error.
  std::vector<png_bytep> rows;
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return reader.message[0] ? reader.message : "libpng could not start";
  }
  png_set_read_fn(png, &reader, png_read_memory);
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  image.height = png_get_image_height(png, info);
  image.width = png_get_image_width(png, info);
  image.channels = (color_type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  if (header_only) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "";
  }
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t row_bytes = png_get_rowbytes(png, info);
  image.channels = png_get_channels(png, info);
  image.pixels.resize(row_bytes * static_cast<std::size_t>(image.height));
  rows.resize(static_cast<std::size_t>(image.height));
  for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = image.pixels.data() + y * row_bytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return "";
}

Image decode_png(std::string_view bytes, int channels, const std::string& source,
                 bool header_only) {
  Image image;
  const std::string error = decode_png_pixels(bytes, image, header_only);
  if (!error.empty()) throw ImageError(source + ": damaged PNG: " + error);
  if (!header_only) convert_channels(image, channels);
  return image;
}

void check_encodable(const Image& image, bool cmyk_allowed) {
  const bool channels_ok =
      image.channels == 1 || image.channels == 3 || (cmyk_allowed && image.channels == 4);
  if (image.height <= 0 || image.width <= 0 || !channels_ok ||
      image.pixels.size() != static_cast<std::size_t>(image.height * image.width * image.channels))
    throw Error("encode: an image of " + std::to_string(image.height) + "x" +
                std::to_string(image.width) + "x" + std::to_string(image.channels) + " with " +
                std::to_string(image.pixels.size()) + " bytes of pixels cannot be encoded");
}

}  // namespace

ImageFormat sniff_image_format(std::string_view bytes) {
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
      static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF)
    return ImageFormat::kJpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0)
    return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kUnknown:
      break;
  }
  return "";
}

Image decode_image(std::string_view bytes, int channels, const std::string& source) {
  check_channels(channels);
  if (sniff_image_format(bytes) != ImageFormat::kUnknown) {
    // A few hundred bytes can claim 20000 x 20000 pixels: 1.2 GB decoded.
    const ImageInfo info = read_image_info(bytes, source);
    if (info.height * info.width > kMaxImagePixels)
      throw ImageError(source + ": " + std::to_string(info.width) + " x " +
                       std::to_string(info.height) + " pixels, more than the " +
                       std::to_string(kMaxImagePixels) +
                       " an image may have (a decompression bomb?); resize it first");
  }
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kJpeg: {
      Image image;
      const std::string error = decode_jpeg_pixels(bytes, channels == 1, image, false);
      if (!error.empty()) throw ImageError(source + ": damaged JPEG: " + error);
      convert_channels(image, channels);
      return image;
    }
    case ImageFormat::kPng:
      return decode_png(bytes, channels, source, false);
    case ImageFormat::kUnknown:
      break;
  }
  throw ImageError(source + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) +
                   " bytes)");
}

ImageInfo read_image_info(std::string_view bytes, const std::string& source) {
  ImageInfo info;
  info.format = sniff_image_format(bytes);
  Image image;
  if (info.format == ImageFormat::kJpeg) {
    const std::string error = decode_jpeg_pixels(bytes, false, image, true);
    if (!error.empty()) throw ImageError(source + ": damaged JPEG: " + error);
  } else if (info.format == ImageFormat::kPng) {
    image = decode_png(bytes, 0, source, true);
  } else {
    throw ImageError(source + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) +
                     " bytes)");
  }
  info.height = image.height;
  info.width = image.width;
  info.channels = image.channels;
  return info;
}

std::string encode_png(const Image& image) {
  check_encodable(image, false);
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr))
    throw Error(std::string("encode_png: ") + png.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr))
    throw Error(std::string("encode_png: ") + png.message);
  out.resize(size);
  return out;
}

std::string encode_jpeg(const Image& image, int quality) {
  check_encodable(image, true);
  if (quality < 1 || quality > 100)
    throw Error("encode_jpeg: quality must be in 1..100, got " + std::to_string(quality));
  std::string out;
  const std::string error = encode_jpeg_bytes(image, quality, out);
  if (!error.empty()) throw Error("encode_jpeg: " + error);
  return out;
}

}  // namespace garden::vision
