# Garden's layers, each an OBJECT library that links only to the layers below
# it, all linked into the one libgarden that users get as garden::garden.
#
# The build enforces the direction: each layer compiles against a staged
# include tree, build/layers/<layer>/garden/..., that holds links to its own
# public headers and to those of the layers it depends on, and nothing else.
# An upward #include "garden/<higher layer>/x.h" fails with "No such file or
# directory" (tests/layering checks that it does).

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

# garden_layer(NAME <name> FOLDER <include/src folder> [DEPENDS <lower layers>...])
# Sources are src/<folder>/*.cpp (not recursive); headers include/garden/<folder>/.
function(garden_layer)
  cmake_parse_arguments(L "" "NAME;FOLDER" "DEPENDS" ${ARGN})
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
  add_library(${target} OBJECT ${sources})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  target_link_libraries(${target} PUBLIC garden_build_settings)
  foreach(dep ${L_DEPENDS})
    target_link_libraries(${target} PUBLIC garden_layer_${dep})
  endforeach()
  target_precompile_headers(${target} REUSE_FROM garden_pch)

  set(GARDEN_LAYER_VISIBLE_${L_NAME} ${visible} PARENT_SCOPE)
  set(GARDEN_LAYER_FOLDER_${L_NAME} ${L_FOLDER} PARENT_SCOPE)
  list(APPEND GARDEN_LAYERS ${L_NAME})
  set(GARDEN_LAYERS ${GARDEN_LAYERS} PARENT_SCOPE)
endfunction()
