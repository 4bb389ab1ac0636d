// The registered vision experiments: resnet_imagenet (Model Garden's),
// vision/mnist and vision/flowers (sized for a CPU), and the task.
#pragma once

namespace garden::vision {

// Registers the image_classification task and its experiments.
void register_vision();

}  // namespace garden::vision
