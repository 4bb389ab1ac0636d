# Garden's layers, each an OBJECT library that links only to the layers below
# it, all linked into the one libgarden that users get as garden::garden.
#
# The build enforces the direction: each layer compiles against a staged
# include tree, build/layers/<layer>/garden/..., that holds links to its own
# public headers and to those of the layers it depends on, and nothing else.
# An upward #include "garden/<higher layer>/x.h" fails with "No such file or
# directory" (tests/layering checks that it does).

include(${CMAKE_CURRENT_LIST_DIR}/GardenBatches.cmake)

# The settings every layer, and the precompiled header they share, compile
# with; identical flags let one precompiled header serve every layer.
add_library(garden_build_settings INTERFACE)
target_link_libraries(garden_build_settings INTERFACE torch ${GARDEN_YAML_CPP}
                                                      nlohmann_json::nlohmann_json Threads::Threads)
target_compile_options(garden_build_settings INTERFACE -Wall -Wextra)
if(GARDEN_OPENMP)
  # Compiled with OpenMP (CMakeLists.txt); libgarden links the runtime.
  separate_arguments(GARDEN_OPENMP_FLAGS UNIX_COMMAND "${OpenMP_CXX_FLAGS}")
  target_compile_options(garden_build_settings INTERFACE ${GARDEN_OPENMP_FLAGS})
endif()

add_library(garden_pch OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/src/pch.cpp)
target_link_libraries(garden_pch PRIVATE garden_build_settings)
target_precompile_headers(garden_pch PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/pch.h)

set(GARDEN_LAYERS "")

# Links `folder` (a path under include/garden) into the staged tree `root`.
function(_garden_stage_folder root folder)
  set(link ${root}/garden/${folder})
  get_filename_component(parent ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT EXISTS ${link})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/include/garden/${folder} ${link} SYMBOLIC)
  endif()
endfunction()

# garden_layer(NAME <name> FOLDER <include/src folder> [DEPENDS <lower layers>...]
#              [BATCH_SIZE <sources per batch>])
# Sources are src/<folder>/*.cpp (not recursive); headers include/garden/<folder>/.
function(garden_layer)
  cmake_parse_arguments(L "" "NAME;FOLDER;BATCH_SIZE" "DEPENDS" ${ARGN})
  foreach(dep ${L_DEPENDS})
    if(NOT dep IN_LIST GARDEN_LAYERS)
      message(FATAL_ERROR "layer ${L_NAME} depends on '${dep}', which is not a layer below it")
    endif()
  endforeach()

  # What this layer may include: itself and everything below it, transitively.
  set(visible ${L_FOLDER})
  foreach(dep ${L_DEPENDS})
    list(APPEND visible ${GARDEN_LAYER_VISIBLE_${dep}})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set(root ${CMAKE_BINARY_DIR}/layers/${L_NAME})
  file(REMOVE_RECURSE ${root})
  foreach(folder ${visible})
    # A folder inside another visible folder comes with it.
    set(covered FALSE)
    foreach(other ${visible})
      string(FIND "${folder}" "${other}/" at)
      if(at EQUAL 0)
        set(covered TRUE)
      endif()
    endforeach()
    if(NOT covered)
      _garden_stage_folder(${root} ${folder})
    endif()
  endforeach()

  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/${L_FOLDER}/*.cpp)
  set(target garden_layer_${L_NAME})
  # The sources come in garden_add_layer_sources(), once every per-source
  # property is set.
  add_library(${target} OBJECT)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  target_link_libraries(${target} PUBLIC garden_build_settings)
  foreach(dep ${L_DEPENDS})
    target_link_libraries(${target} PUBLIC garden_layer_${dep})
  endforeach()

  set(GARDEN_LAYER_SOURCES_${L_NAME} ${sources} PARENT_SCOPE)
  set(GARDEN_LAYER_BATCH_SIZE_${L_NAME} ${L_BATCH_SIZE} PARENT_SCOPE)
  set(GARDEN_LAYER_VISIBLE_${L_NAME} ${visible} PARENT_SCOPE)
  set(GARDEN_LAYER_FOLDER_${L_NAME} ${L_FOLDER} PARENT_SCOPE)
  list(APPEND GARDEN_LAYERS ${L_NAME})
  set(GARDEN_LAYERS ${GARDEN_LAYERS} PARENT_SCOPE)
endfunction()

# Adds every layer's sources, in batches (cmake/GardenBatches.cmake). Called
# after the per-source properties (the kernels' floating-point options) are
# set, since a batch holds only sources compiled alike.
function(garden_add_layer_sources)
  foreach(layer ${GARDEN_LAYERS})
    # The precompiled header only for a layer with sources that use it: the
    # others need not wait for it to be built.
    foreach(source ${GARDEN_LAYER_SOURCES_${layer}})
      garden_uses_torch(${source} uses_torch)
      get_source_file_property(skip_pch ${source} SKIP_PRECOMPILE_HEADERS)
      if(uses_torch AND NOT skip_pch)
        target_precompile_headers(garden_layer_${layer} REUSE_FROM garden_pch)
        break()
      endif()
    endforeach()
    set(batch_size ${GARDEN_UNITY_BATCH_SIZE})
    if(GARDEN_LAYER_BATCH_SIZE_${layer})
      set(batch_size ${GARDEN_LAYER_BATCH_SIZE_${layer}})
    endif()
    garden_batched_sources(garden_layer_${layer} SOURCES ${GARDEN_LAYER_SOURCES_${layer}}
                           BATCH_SIZE ${batch_size})
  endforeach()
endfunction()
