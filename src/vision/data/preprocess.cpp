#include "garden/vision/data/preprocess.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "garden/base/error.h"

namespace garden::vision {

double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// An integer uniform in [0, n), n >= 1.
int64_t uniform_below(std::mt19937_64& rng, int64_t n) {
  return std::min<int64_t>(n - 1, static_cast<int64_t>(uniform01(rng) * static_cast<double>(n)));
}

// One attempt of TensorFlow's GenerateRandomCrop (lrint: rounding half to
// even, as its lrintf): false when no crop of
// this aspect ratio has an area within [min_area, max_area] and fits.
bool random_crop(int64_t height, int64_t width, double min_area, double max_area, double aspect,
                 std::mt19937_64& rng, CropWindow& window) {
  const double area = static_cast<double>(height * width);
  const double min_pixels = min_area * area, max_pixels = max_area * area;
  int64_t crop_height = std::lrint(std::sqrt(min_pixels / aspect));
  int64_t max_height = std::lrint(std::sqrt(max_pixels / aspect));
  // The largest height whose rounded width still fits.
  if (std::lrint(static_cast<double>(max_height) * aspect) > width)
    max_height = static_cast<int64_t>((static_cast<double>(width) + 0.5 - 1e-7) / aspect);
  max_height = std::min(max_height, height);
  crop_height = std::min(crop_height, max_height);
  if (crop_height < max_height) crop_height += uniform_below(rng, max_height - crop_height + 1);
  int64_t crop_width = std::lrint(static_cast<double>(crop_height) * aspect);
  double pixels = static_cast<double>(crop_width * crop_height);
  if (pixels < min_pixels) {
    crop_height += 1;
    crop_width = std::lrint(static_cast<double>(crop_height) * aspect);
    pixels = static_cast<double>(crop_width * crop_height);
  }
  if (pixels > max_pixels) {
    crop_height -= 1;
    crop_width = std::lrint(static_cast<double>(crop_height) * aspect);
    pixels = static_cast<double>(crop_width * crop_height);
  }
  if (pixels < min_pixels || pixels > max_pixels || crop_width > width || crop_height > height ||
      crop_width <= 0 || crop_height <= 0)
    return false;
  window.height = crop_height;
  window.width = crop_width;
  // TensorFlow's offsets: uniform in [0, size - crop), so a crop smaller
  // than the image never touches its last row or column.
  window.y = crop_height < height ? uniform_below(rng, height - crop_height) : 0;
  window.x = crop_width < width ? uniform_below(rng, width - crop_width) : 0;
  return true;
}

void check_crop_options(int64_t height, int64_t width, const DistortedCropOptions& o) {
  if (height <= 0 || width <= 0)
    throw Error("random crop: an image of " + std::to_string(height) + "x" + std::to_string(width));
  if (!(o.min_aspect > 0 && o.min_aspect <= o.max_aspect && o.min_area > 0 &&
        o.min_area <= o.max_area && o.max_area <= 1))
    throw Error(
        "random crop: aspect_ratio_range and area_range must be increasing, positive, "
        "and areas at most 1");
}

}  // namespace

CropWindow center_crop_window(int64_t height, int64_t width, double fraction) {
  if (height <= 0 || width <= 0 || !(fraction > 0 && fraction <= 1))
    throw Error("center crop: an image of " + std::to_string(height) + "x" +
                std::to_string(width) + " and fraction " + std::to_string(fraction));
  const double side = fraction * static_cast<double>(std::min(height, width));
  CropWindow window;
  window.y = static_cast<int64_t>((static_cast<double>(height) - side) / 2.0);
  window.x = static_cast<int64_t>((static_cast<double>(width) - side) / 2.0);
  window.height = window.width = std::max<int64_t>(1, static_cast<int64_t>(side));
  return window;
}

CropWindow sample_distorted_crop(int64_t height, int64_t width, const DistortedCropOptions& o,
                                 std::mt19937_64& rng) {
  check_crop_options(height, width, o);
  for (int attempt = 0; attempt < o.max_attempts; ++attempt) {
    const double aspect = o.min_aspect + uniform01(rng) * (o.max_aspect - o.min_aspect);
    CropWindow window;
    if (!random_crop(height, width, o.min_area, o.max_area, aspect, rng, window)) continue;
    // min_object_covered: the share of the whole image the crop covers.
    if (static_cast<double>(window.height * window.width) <
        o.min_area * static_cast<double>(height * width))
      continue;
    return window;
  }
  return CropWindow{0, 0, height, width};
}

CropWindow sample_resized_crop(int64_t height, int64_t width, const DistortedCropOptions& o,
                               std::mt19937_64& rng) {
  check_crop_options(height, width, o);
  const double area = static_cast<double>(height * width);
  const double log_min = std::log(o.min_aspect), log_max = std::log(o.max_aspect);
  for (int attempt = 0; attempt < o.max_attempts; ++attempt) {
    const double target = area * (o.min_area + uniform01(rng) * (o.max_area - o.min_area));
    const double aspect = std::exp(log_min + uniform01(rng) * (log_max - log_min));
    const int64_t crop_width = std::lrint(std::sqrt(target * aspect));
    const int64_t crop_height = std::lrint(std::sqrt(target / aspect));
    if (crop_width <= 0 || crop_width > width || crop_height <= 0 || crop_height > height) continue;
    CropWindow window;
    window.height = crop_height;
    window.width = crop_width;
    window.y = uniform_below(rng, height - crop_height + 1);
    window.x = uniform_below(rng, width - crop_width + 1);
    return window;
  }
  const double ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t crop_height = height, crop_width = width;
  if (ratio < o.min_aspect)
    crop_height = std::max<int64_t>(1, std::lrint(static_cast<double>(width) / o.min_aspect));
  else if (ratio > o.max_aspect)
    crop_width = std::max<int64_t>(1, std::lrint(static_cast<double>(height) * o.max_aspect));
  return CropWindow{(height - crop_height) / 2, (width - crop_width) / 2, crop_height, crop_width};
}

at::Tensor crop_and_resize(const Image& image, const CropWindow& w, int64_t out_height,
                           int64_t out_width) {
  if (w.y < 0 || w.x < 0 || w.height <= 0 || w.width <= 0 || w.y + w.height > image.height ||
      w.x + w.width > image.width || out_height <= 0 || out_width <= 0)
    throw Error("crop_and_resize: window " + std::to_string(w.y) + "," + std::to_string(w.x) +
                " " + std::to_string(w.height) + "x" + std::to_string(w.width) +
                " does not fit an image of " + std::to_string(image.height) + "x" +
                std::to_string(image.width));
  const at::Tensor pixels =
      at::from_blob(const_cast<uint8_t*>(image.pixels.data()),
                    {image.height, image.width, image.channels}, at::kByte);
  const at::Tensor crop = pixels.slice(0, w.y, w.y + w.height).slice(1, w.x, w.x + w.width);
  const at::Tensor nchw = crop.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  if (w.height == out_height && w.width == out_width)
    return nchw.squeeze(0).permute({1, 2, 0}).contiguous();
  // align_corners false: source = (target + 0.5) * in / out - 0.5, clamped
  // to the image, as tf.image.resize's half-pixel centers.
  const at::Tensor resized =
      at::upsample_bilinear2d(nchw, {out_height, out_width}, /*align_corners=*/false);
  return resized.squeeze(0).permute({1, 2, 0}).contiguous();
}

at::Tensor flip_left_right(const at::Tensor& image) { return image.flip({1}); }

at::Tensor normalize_image(const at::Tensor& image, const std::array<double, 3>& mean,
                           const std::array<double, 3>& stddev) {
  if (image.dim() != 3 || image.size(2) != 3)
    throw Error("normalize_image: expects [height, width, 3]");
  const at::Tensor m = at::tensor({mean[0], mean[1], mean[2]}, image.options());
  const at::Tensor s = at::tensor({stddev[0], stddev[1], stddev[2]}, image.options());
  return (image - m) / s;
}

}  // namespace garden::vision
