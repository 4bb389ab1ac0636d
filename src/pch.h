// Precompiled header of the garden library: the heavy, stable headers.
#pragma once
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
