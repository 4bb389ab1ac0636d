// Model Garden's image preprocessing for classification
// (official/vision/ops/preprocess_ops.py), on decoded images: the Inception
// crop of training (tf.image.sample_distorted_bounding_box's rule), the
// center crop of evaluation, bilinear resizing as tf.image.resize, the
// horizontal flip and the normalization by ImageNet's mean and deviation.
#pragma once

#include <ATen/Tensor.h>

#include <array>
#include <cstdint>
#include <random>

#include "garden/vision/data/image_codec.h"

namespace garden::vision {

// Model Garden's MEAN_RGB and STDDEV_RGB (ImageNet's, on 0..255).
constexpr std::array<double, 3> kMeanRgb = {0.485 * 255, 0.456 * 255, 0.406 * 255};
constexpr std::array<double, 3> kStddevRgb = {0.229 * 255, 0.224 * 255, 0.225 * 255};
constexpr double kCenterCropFraction = 0.875;

// A window of an image in pixels: rows y .. y + height, columns x .. x + width.
struct CropWindow {
  int64_t y = 0, x = 0, height = 0, width = 0;
  bool operator==(const CropWindow& o) const {
    return y == o.y && x == o.x && height == o.height && width == o.width;
  }
};

// Model Garden's center_crop_image: a square of side fraction x the short
// side (truncated), offset by the truncated half of what is left.
CropWindow center_crop_window(int64_t height, int64_t width,
                              double fraction = kCenterCropFraction);

// Model Garden's random_crop_image: per attempt an aspect ratio (width /
// height) uniform in [min_aspect, max_aspect] and a crop of area between
// min_area and max_area of the image, its height drawn between the
// smallest and largest that fit, then a uniform offset; the crop must
// cover at least min_area of the image (min_object_covered = area_range[0]).
// After max_attempts failures, the whole image.
struct DistortedCropOptions {
  double min_aspect = 3.0 / 4.0, max_aspect = 4.0 / 3.0;
  double min_area = 0.08, max_area = 1.0;
  int max_attempts = 10;
};
CropWindow sample_distorted_crop(int64_t height, int64_t width, const DistortedCropOptions& options,
                                 std::mt19937_64& rng);

// torchvision's RandomResizedCrop window: per attempt an area uniform in
// [min_area, max_area] of the image and an aspect ratio (width / height)
// log-uniform in [min_aspect, max_aspect], rounded half to even as
// Python's round; the first that fits is placed at a uniform offset in
// [0, size - crop]. After max_attempts failures, the largest centered
// crop whose aspect ratio is within the range.
CropWindow sample_resized_crop(int64_t height, int64_t width, const DistortedCropOptions& options,
                               std::mt19937_64& rng);

// The window of `image` resized to out_height x out_width by bilinear
// interpolation with half-pixel centers and no antialiasing
// (tf.image.resize's BILINEAR): float32 [out_height, out_width, channels],
// values on 0..255.
at::Tensor crop_and_resize(const Image& image, const CropWindow& window, int64_t out_height,
                           int64_t out_width);

// Mirrors a [height, width, channels] tensor left to right.
at::Tensor flip_left_right(const at::Tensor& image);

// (image - mean) / stddev per channel of a [height, width, 3] float tensor on
// 0..255 (Model Garden's normalize_image).
at::Tensor normalize_image(const at::Tensor& image, const std::array<double, 3>& mean = kMeanRgb,
                           const std::array<double, 3>& stddev = kStddevRgb);

// A uniform double in [0, 1) from the top 53 bits of one draw: the same
// numbers on every platform (std::uniform_real_distribution's are not).
double uniform01(std::mt19937_64& rng);

}  // namespace garden::vision
