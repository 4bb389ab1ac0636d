// Image decoding against files written here by hand (PNG: the chunks, zlib
// and CRC-32 of the PNG specification, sharing nothing with libpng), JPEG
// against the pixels encoded (within JPEG's loss) and TensorFlow's CMYK
// rule, and every damaged-file path.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "garden/vision/data/image_codec.h"
#include "test_util.h"

namespace {

using garden::vision::decode_image;
using garden::vision::encode_jpeg;
using garden::vision::encode_png;
using garden::vision::Image;
using garden::vision::ImageError;
using garden::vision::ImageFormat;

void append_be32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

void append_chunk(std::string& out, const char* type, const std::string& data) {
  append_be32(out, static_cast<uint32_t>(data.size()));
  const std::string typed = std::string(type, 4) + data;
  out += typed;
  append_be32(out, static_cast<uint32_t>(
                       crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
}

// A PNG by the specification: IHDR, optional PLTE/tRNS, one IDAT of the
// rows each with filter byte 0, IEND. `rows` are the raw scanline bytes.
std::string hand_png(int width, int height, int bit_depth, int color_type,
                     const std::vector<std::string>& rows, const std::string& palette = "",
                     const std::string& transparency = "") {
  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string header;
  append_be32(header, static_cast<uint32_t>(width));
  append_be32(header, static_cast<uint32_t>(height));
  header += static_cast<char>(bit_depth);
  header += static_cast<char>(color_type);
  header += std::string(3, '\0');  // deflate, adaptive filtering, no interlace
  append_chunk(png, "IHDR", header);
  if (!palette.empty()) append_chunk(png, "PLTE", palette);
  if (!transparency.empty()) append_chunk(png, "tRNS", transparency);
  std::string raw;
  for (const auto& row : rows) raw += '\0' + row;
  uLongf size = compressBound(raw.size());
  std::string compressed(size, '\0');
  compress(reinterpret_cast<Bytef*>(compressed.data()), &size,
           reinterpret_cast<const Bytef*>(raw.data()), raw.size());
  compressed.resize(size);
  append_chunk(png, "IDAT", compressed);
  append_chunk(png, "IEND", "");
  return png;
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

std::vector<int> pixels(const Image& image) {
  return std::vector<int>(image.pixels.begin(), image.pixels.end());
}

TEST(ImageCodecTest, PngGrayAndRgbDecodeToTheirExactPixels) {
  const std::string gray = hand_png(3, 2, 8, 0, {bytes({0, 128, 255}), bytes({7, 8, 9})});
  const Image g = decode_image(gray, 0, "gray.png");
  EXPECT_EQ(g.height, 2);
  EXPECT_EQ(g.width, 3);
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(pixels(g), (std::vector<int>{0, 128, 255, 7, 8, 9}));

  const std::string rgb = hand_png(2, 1, 8, 2, {bytes({255, 0, 0, 10, 20, 30})});
  const Image c = decode_image(rgb, 0, "rgb.png");
  EXPECT_EQ(c.channels, 3);
  EXPECT_EQ(pixels(c), (std::vector<int>{255, 0, 0, 10, 20, 30}));
}

TEST(ImageCodecTest, PngAlphaIsDroppedNotComposited) {
  // RGBA with alpha 0 and 128: TensorFlow's channels=3 strips the alpha, the
  // colors stay as stored.
  const std::string rgba = hand_png(2, 1, 8, 6, {bytes({200, 100, 50, 0, 10, 20, 30, 128})});
  EXPECT_EQ(pixels(decode_image(rgba, 3, "rgba.png")),
            (std::vector<int>{200, 100, 50, 10, 20, 30}));
  const std::string gray_alpha = hand_png(2, 1, 8, 4, {bytes({90, 0, 60, 255})});
  const Image ga = decode_image(gray_alpha, 0, "ga.png");
  EXPECT_EQ(ga.channels, 1);
  EXPECT_EQ(pixels(ga), (std::vector<int>{90, 60}));
}

TEST(ImageCodecTest, PngPaletteAnd16BitAreReadAs8BitPixels) {
  // Palette: index 1 -> (1, 2, 3), index 0 -> (250, 251, 252).
  const std::string indexed =
      hand_png(2, 1, 8, 3, {bytes({1, 0})}, bytes({250, 251, 252, 1, 2, 3}));
  EXPECT_EQ(pixels(decode_image(indexed, 0, "palette.png")),
            (std::vector<int>{1, 2, 3, 250, 251, 252}));
  // 16-bit gray: 0xFFFF -> 255, 0x0000 -> 0, 0x8080 -> 128.
  const std::string deep = hand_png(3, 1, 16, 0, {bytes({0xFF, 0xFF, 0, 0, 0x80, 0x80})});
  EXPECT_EQ(pixels(decode_image(deep, 0, "deep.png")), (std::vector<int>{255, 0, 128}));
}

TEST(ImageCodecTest, ChannelsConvertAsTensorFlowDoes) {
  const std::string gray = hand_png(2, 1, 8, 0, {bytes({10, 200})});
  EXPECT_EQ(pixels(decode_image(gray, 3, "g")), (std::vector<int>{10, 10, 10, 200, 200, 200}));
  // RGB -> gray by BT.601's weights: 0.2989 * 255 = 76.2 -> 76; (10, 20, 30):
  // 2.989 + 11.74 + 3.42 = 18.15 -> 18.
  const std::string rgb = hand_png(2, 1, 8, 2, {bytes({255, 0, 0, 10, 20, 30})});
  EXPECT_EQ(pixels(decode_image(rgb, 1, "c")), (std::vector<int>{76, 18}));
  EXPECT_NE(garden_test::error_of([&] { decode_image(rgb, 2, "c"); }).find("0, 1 or 3"),
            std::string::npos);
}

Image blocks(int channels) {
  // 16 x 16 in four flat 8 x 8 blocks (JPEG's own block size: little loss).
  Image image;
  image.height = image.width = 16;
  image.channels = channels;
  const int colors[4][4] = {{255, 0, 0, 0}, {0, 255, 0, 40}, {0, 0, 255, 128}, {90, 90, 90, 255}};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < channels; ++c)
        image.pixels.push_back(static_cast<uint8_t>(colors[(y / 8) * 2 + x / 8][c]));
  return image;
}

TEST(ImageCodecTest, JpegRoundTripKeepsFlatColors) {
  for (int channels : {1, 3}) {
    SCOPED_TRACE(channels);
    const Image image = blocks(channels);
    const std::string jpeg = encode_jpeg(image, 100);
    EXPECT_EQ(garden::vision::sniff_image_format(jpeg), ImageFormat::kJpeg);
    const Image decoded = decode_image(jpeg, 0, "blocks.jpg");
    ASSERT_EQ(decoded.channels, channels);
    ASSERT_EQ(decoded.pixels.size(), image.pixels.size());
    for (std::size_t i = 0; i < image.pixels.size(); ++i)
      EXPECT_NEAR(decoded.pixels[i], image.pixels[i], 3) << i;
    const auto info = garden::vision::read_image_info(jpeg, "blocks.jpg");
    EXPECT_EQ(info.height, 16);
    EXPECT_EQ(info.width, 16);
    EXPECT_EQ(info.channels, channels);
  }
}

TEST(ImageCodecTest, CmykJpegIsConvertedWithAdobesInvertedValues) {
  // Written with Adobe's marker, so the stored values are inverted: R = C*K/255.
  Image cmyk;
  cmyk.height = cmyk.width = 8;
  cmyk.channels = 4;
  for (int i = 0; i < 64; ++i)
    for (int v : {255, 0, 255, 128}) cmyk.pixels.push_back(static_cast<uint8_t>(v));
  const Image rgb = decode_image(encode_jpeg(cmyk, 100), 0, "cmyk.jpg");
  ASSERT_EQ(rgb.channels, 3);
  // (255 * 128 / 255, 0, 128) = (128, 0, 128).
  EXPECT_NEAR(rgb.at(3, 3, 0), 128, 3);
  EXPECT_NEAR(rgb.at(3, 3, 1), 0, 3);
  EXPECT_NEAR(rgb.at(3, 3, 2), 128, 3);
}

TEST(ImageCodecTest, PngEncodingIsLossless) {
  Image image = blocks(3);
  image.pixels[5] = 17;
  const Image decoded = decode_image(encode_png(image), 0, "x.png");
  EXPECT_EQ(decoded.pixels, image.pixels);
  EXPECT_EQ(decoded.channels, 3);
}

TEST(ImageCodecTest, DamagedFilesAreOneErrorNamingTheSource) {
  const std::string jpeg = encode_jpeg(blocks(3), 90);
  const std::string truncated_jpeg = jpeg.substr(0, jpeg.size() / 2);
  std::string message = garden_test::error_of([&] { decode_image(truncated_jpeg, 3, "cut.jpg"); });
  EXPECT_NE(message.find("cut.jpg: damaged JPEG"), std::string::npos) << message;
  EXPECT_THROW(decode_image(truncated_jpeg, 3, "cut.jpg"), ImageError);

  const std::string png = encode_png(blocks(3));
  message =
      garden_test::error_of([&] { decode_image(png.substr(0, png.size() - 30), 0, "cut.png"); });
  EXPECT_NE(message.find("cut.png: damaged PNG"), std::string::npos) << message;
  // A PNG whose pixel data fails its CRC.
  std::string flipped = png;
  flipped[flipped.size() - 20] ^= 0x55;
  message = garden_test::error_of([&] { decode_image(flipped, 0, "crc.png"); });
  EXPECT_NE(message.find("crc.png: damaged PNG"), std::string::npos) << message;

  message = garden_test::error_of([&] { decode_image("GIF89a....", 0, "x.gif"); });
  EXPECT_EQ(message, "x.gif: not a JPEG or PNG image (10 bytes)");
  message = garden_test::error_of([&] { decode_image("", 0, "empty"); });
  EXPECT_EQ(message, "empty: not a JPEG or PNG image (0 bytes)");
  // The JPEG signature and nothing after it.
  message = garden_test::error_of([&] { decode_image(jpeg.substr(0, 4), 0, "head.jpg"); });
  EXPECT_NE(message.find("head.jpg: damaged JPEG"), std::string::npos) << message;
}

// A small file whose header claims 20000 x 20000 pixels (1.2 GB decoded)
// is refused from its header, naming the file.
TEST(ImageCodecTest, AnImageOfMorePixelsThanTheLimitIsRefusedFromItsHeader) {
  const std::string bomb = hand_png(20000, 20000, 8, 0, {std::string(20000, '\0')});
  EXPECT_LT(bomb.size(), 1000u);
  const std::string message = garden_test::error_of([&] { decode_image(bomb, 3, "bomb.png"); });
  EXPECT_EQ(message,
            "bomb.png: 20000 x 20000 pixels, more than the 178956970 an image may have (a "
            "decompression bomb?); resize it first");
}

TEST(ImageCodecTest, EncodersRefuseImagesThatDoNotFit) {
  Image image = blocks(3);
  image.pixels.pop_back();
  EXPECT_NE(garden_test::error_of([&] { encode_png(image); }).find("cannot be encoded"),
            std::string::npos);
  EXPECT_NE(garden_test::error_of([&] { encode_jpeg(blocks(3), 0); }).find("quality"),
            std::string::npos);
  Image cmyk = blocks(1);
  cmyk.channels = 4;
  cmyk.pixels.resize(16 * 16 * 4);
  EXPECT_NE(garden_test::error_of([&] { encode_png(cmyk); }).find("cannot be encoded"),
            std::string::npos);
}

}  // namespace
