// Model Garden's classification preprocessing against its definitions: the
// center crop's arithmetic, the Inception crop's bounds, areas and aspect
// ratios (TensorFlow's rule and torchvision's), bilinear resizing on
// hand-computed values, the flip and the normalization.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <vector>

#include "garden/vision/data/preprocess.h"
#include "test_util.h"

namespace {

using garden::vision::CropWindow;
using garden::vision::Image;

TEST(PreprocessTest, TheCenterCropIsModelGardens) {
  // side = int(0.875 * min(h, w)); offsets int((size - 0.875 * min) / 2).
  EXPECT_EQ(garden::vision::center_crop_window(100, 80), (CropWindow{15, 5, 70, 70}));
  EXPECT_EQ(garden::vision::center_crop_window(256, 256), (CropWindow{16, 16, 224, 224}));
  // 0.875 * 3 = 2.625: side 2, offsets int(1.1875) = 1 and int(0.1875) = 0.
  EXPECT_EQ(garden::vision::center_crop_window(5, 3), (CropWindow{1, 0, 2, 2}));
  EXPECT_NE(garden_test::error_of([] { garden::vision::center_crop_window(0, 3); }),
            "(no error)");
}

bool inside(const CropWindow& w, int64_t height, int64_t width) {
  return w.y >= 0 && w.x >= 0 && w.height > 0 && w.width > 0 && w.y + w.height <= height &&
         w.x + w.width <= width;
}

// Of 5,000 crops: areas drawn across the range (under 0.2, over 0.8),
// offsets across the image (touching its top, its bottom); and the same
// seed draws the same windows.
template <typename Sample>
void expect_spread_and_seeded(int small, int large, int at_top, int at_bottom, Sample sample) {
  EXPECT_GT(small, 250);
  EXPECT_GT(large, 100);
  EXPECT_GT(at_top, 20);
  EXPECT_GT(at_bottom, 20);
  std::mt19937_64 a(3), b(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sample(a), sample(b));
}

TEST(PreprocessTest, InceptionCropsStayInsideWithinTheirAreaAndAspectRanges) {
  const int64_t height = 120, width = 90;
  std::mt19937_64 rng(7);
  garden::vision::DistortedCropOptions options;
  int small = 0, large = 0, whole = 0, at_top = 0, at_bottom = 0;
  for (int i = 0; i < 5000; ++i) {
    const CropWindow w = garden::vision::sample_distorted_crop(height, width, options, rng);
    ASSERT_TRUE(inside(w, height, width)) << w.y << " " << w.x << " " << w.height << " " << w.width;
    if (w == CropWindow{0, 0, height, width}) {
      ++whole;
      continue;
    }
    const double area = static_cast<double>(w.height * w.width) / (height * width);
    EXPECT_GE(area, 0.08);
    EXPECT_LE(area, 1.0);
    // width = round(height * aspect): within half a pixel of the range.
    const double aspect = static_cast<double>(w.width) / static_cast<double>(w.height);
    EXPECT_GE(aspect, 0.75 - 0.5 / w.height);
    EXPECT_LE(aspect, 4.0 / 3.0 + 0.5 / w.height);
    small += area < 0.2;
    large += area > 0.8;
    at_top += w.y == 0;
    // TensorFlow draws the offset from [0, size - crop): a crop shorter than
    // the image ends at least a row above its bottom.
    EXPECT_TRUE(w.height == height || w.y + w.height < height);
    at_bottom += w.height < height && w.y + w.height == height - 1;
  }
  EXPECT_LT(whole, 5000);
  expect_spread_and_seeded(small, large, at_top, at_bottom, [&](std::mt19937_64& rng) {
    return garden::vision::sample_distorted_crop(64, 48, options, rng);
  });
}

TEST(PreprocessTest, AnImageNoCropFitsGivesTheWholeImage) {
  // 1 x 1000: any crop with an aspect ratio in [3/4, 4/3] covers < 8 %.
  std::mt19937_64 rng(1);
  EXPECT_EQ(garden::vision::sample_distorted_crop(1, 1000, {}, rng), (CropWindow{0, 0, 1, 1000}));
}

TEST(PreprocessTest, ResizedCropsAreTorchvisionsRandomResizedCrop) {
  const int64_t height = 120, width = 90;
  std::mt19937_64 rng(7);
  garden::vision::DistortedCropOptions options;
  int small = 0, large = 0, at_top = 0, at_bottom = 0;
  for (int i = 0; i < 5000; ++i) {
    const CropWindow w = garden::vision::sample_resized_crop(height, width, options, rng);
    ASSERT_TRUE(inside(w, height, width)) << w.y << " " << w.x << " " << w.height << " " << w.width;
    // Both sides are rounded from the drawn area and aspect ratio: the
    // area is within a pixel's rounding of each side of its range.
    const double area = static_cast<double>(w.height * w.width) / (height * width);
    EXPECT_GE(area, 0.08 * (1 - 1.0 / w.height) * (1 - 1.0 / w.width));
    EXPECT_LE(area, 1.0);
    // width = round(sqrt(area * aspect)), height = round(sqrt(area / aspect)).
    EXPECT_GE(w.width, 0.75 * (w.height - 0.5) - 0.5);
    EXPECT_LE(w.width, 4.0 / 3.0 * (w.height + 0.5) + 0.5);
    small += area < 0.2;
    large += area > 0.8;
    at_top += w.y == 0;
    // torchvision draws the offset from [0, size - crop]: a crop may end
    // on the image's last row.
    at_bottom += w.height < height && w.y + w.height == height;
  }
  expect_spread_and_seeded(small, large, at_top, at_bottom, [&](std::mt19937_64& rng) {
    return garden::vision::sample_resized_crop(64, 48, options, rng);
  });
}

TEST(PreprocessTest, ResizedCropsDrawTheAreaUniformlyAndTheAspectLogUniformly) {
  // On a 1000 x 1000 image every draw of area in [0.1, 0.5] and aspect in
  // [3/4, 4/3] fits at the first attempt. Uniform areas average 0.30
  // (TensorFlow's rule, heights uniform, about 0.27); a log-uniform
  // aspect ratio is below 1 half the time (a uniform one 3/7 of it).
  std::mt19937_64 rng(11);
  garden::vision::DistortedCropOptions options;
  options.min_area = 0.1;
  options.max_area = 0.5;
  const int n = 20000;
  double area_sum = 0;
  int narrow = 0;
  for (int i = 0; i < n; ++i) {
    const CropWindow w = garden::vision::sample_resized_crop(1000, 1000, options, rng);
    area_sum += static_cast<double>(w.height * w.width) / 1e6;
    narrow += w.width < w.height;
  }
  EXPECT_NEAR(area_sum / n, 0.30, 0.005);
  EXPECT_NEAR(static_cast<double>(narrow) / n, 0.5, 0.015);
}

TEST(PreprocessTest, AResizedCropThatNeverFitsIsTheCenteredCropOfTheNearestAspect) {
  // 3 x 100: a crop of at least 8 % (24 pixels) at an aspect ratio of at
  // most 4/3 is at least 4.24 rows high, so every attempt fails; the
  // fallback keeps the 3 rows and round(3 * 4/3) = 4 columns, centered at
  // (100 - 4) / 2 = 48. Transposed, the same.
  std::mt19937_64 rng(1);
  EXPECT_EQ(garden::vision::sample_resized_crop(3, 100, {}, rng), (CropWindow{0, 48, 3, 4}));
  EXPECT_EQ(garden::vision::sample_resized_crop(100, 3, {}, rng), (CropWindow{48, 0, 4, 3}));
  EXPECT_NE(garden_test::error_of([&] { garden::vision::sample_resized_crop(0, 3, {}, rng); }),
            "(no error)");
}

Image gray(int64_t height, int64_t width, std::vector<uint8_t> values) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = 1;
  image.pixels = std::move(values);
  return image;
}

TEST(PreprocessTest, BilinearResizeHasHalfPixelCenters) {
  // 2 x 2 -> 4 x 4: source coordinate (t + 0.5) / 2 - 0.5 = -0.25, 0.25,
  // 0.75, 1.25, clamped to [0, 1].
  const Image image = gray(2, 2, {0, 100, 200, 250});
  const at::Tensor up = garden::vision::crop_and_resize(image, {0, 0, 2, 2}, 4, 4);
  ASSERT_EQ(up.sizes(), (at::IntArrayRef{4, 4, 1}));
  // Rows interpolate the two source rows [0, 25, 75, 100] and
  // [200, 212.5, 237.5, 250] with weights 0, 0.25, 0.75, 1.
  const std::vector<float> expected = {0,   25,      75,      100,   50,  71.875, 115.625, 137.5,
                                       150, 165.625, 196.875, 212.5, 200, 212.5,  237.5,   250};
  const at::Tensor flat = up.reshape(-1);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(flat[i].item<float>(), expected[i], 1e-4) << i;

  // 4 x 4 -> 2 x 2: source (t + 0.5) * 2 - 0.5 = 0.5, 2.5: means of 2 x 2
  // blocks, no antialiasing.
  std::vector<uint8_t> values(16);
  for (int i = 0; i < 16; ++i) values[i] = static_cast<uint8_t>(i * 10);
  const at::Tensor down = garden::vision::crop_and_resize(gray(4, 4, values), {0, 0, 4, 4}, 2, 2);
  EXPECT_NEAR(down[0][0][0].item<float>(), (0 + 10 + 40 + 50) / 4.0, 1e-4);
  EXPECT_NEAR(down[1][1][0].item<float>(), (100 + 110 + 140 + 150) / 4.0, 1e-4);

  // A window at its own size is the window.
  const at::Tensor same = garden::vision::crop_and_resize(gray(4, 4, values), {1, 2, 2, 2}, 2, 2);
  EXPECT_EQ(same.reshape(-1)[0].item<float>(), 60);
  EXPECT_EQ(same.reshape(-1)[3].item<float>(), 110);
  EXPECT_NE(garden_test::error_of(
                [&] { garden::vision::crop_and_resize(gray(4, 4, values), {3, 0, 2, 2}, 2, 2); }),
            "(no error)");
}

TEST(PreprocessTest, FlipAndNormalizationAreTheirDefinitions) {
  at::Tensor image = at::arange(12, at::kFloat).reshape({1, 4, 3});
  const at::Tensor flipped = garden::vision::flip_left_right(image);
  EXPECT_EQ(flipped[0][0][0].item<float>(), 9);
  EXPECT_EQ(flipped[0][3][2].item<float>(), 2);
  const at::Tensor pixel = at::full({1, 1, 3}, 255.0f);
  const at::Tensor normalized = garden::vision::normalize_image(pixel);
  EXPECT_NEAR(normalized[0][0][0].item<float>(), (1 - 0.485) / 0.229, 1e-5);
  EXPECT_NEAR(normalized[0][0][1].item<float>(), (1 - 0.456) / 0.224, 1e-5);
  EXPECT_NEAR(normalized[0][0][2].item<float>(), (1 - 0.406) / 0.225, 1e-5);
}

}  // namespace
