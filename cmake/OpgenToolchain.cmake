# What every opgen package build needs, found once: Python and pybind11, the
# XLA FFI headers (from jaxlib), CUDA (optional), PyTorch >= OPGEN_MIN_TORCH (optional),
# and the opgen_runtime library. Used by opgen's own build and, installed, by
# find_package(opgen) in other projects.
#
# Cache options: OPGEN_CUDA and OPGEN_TORCH (AUTO, ON, OFF), OPGEN_LTO (OFF),
# OPGEN_XLA_FFI_INCLUDE_DIR, OPGEN_TORCH_DIR (the headers and libraries of a
# torch and a jaxlib other than the build Python's: scripts/test_newest.sh
# builds one package against the oldest versions claimed, from another Python).
# Sets: OPGEN_WITH_CUDA, OPGEN_WITH_TORCH, OPGEN_TORCH_INCLUDE_DIR, OPGEN_TORCH_LIB_DIR,
# OPGEN_TORCH_VERSION (major.minor of the torch whose stable-ABI headers the kernels
# are compiled against), OPGEN_WITH_TORCH_EAGER.
# Expects OPGEN_RUNTIME_DIR (the runtime/ folder: include/, src/, python/).
include_guard(GLOBAL)

set(OPGEN_CUDA AUTO CACHE STRING "Build the CUDA kernels and handlers (AUTO, ON, OFF)")
set(OPGEN_TORCH AUTO CACHE STRING "Build the PyTorch kernels (AUTO, ON, OFF)")
set(OPGEN_TORCH_DIR "" CACHE PATH "A torch package folder to build against, read, not imported (default: the build Python's torch)")
# Link-time optimisation of the package's modules. Off: it made every rebuild
# after a one-line body edit relink for ~8 s (bench/bench_edit_loop.py) and
# bought no measurable speed of a call (docs/architecture.md). Defined either
# way, so that pybind11_add_module does not switch it on by itself.
option(OPGEN_LTO "Link-time optimisation of the package's modules" OFF)
set(CMAKE_INTERPROCEDURAL_OPTIMIZATION ${OPGEN_LTO})

include("${CMAKE_CURRENT_LIST_DIR}/OpgenPython.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/OpgenVersions.cmake")

# --- XLA FFI headers, from jaxlib ------------------------------------------
if(NOT OPGEN_XLA_FFI_INCLUDE_DIR)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import os, jaxlib; print(os.path.join(os.path.dirname(jaxlib.__file__), 'include'))"
    OUTPUT_VARIABLE opgen_jaxlib_include OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE opgen_jaxlib_found ERROR_QUIET)
  if(NOT opgen_jaxlib_found EQUAL 0 OR NOT EXISTS "${opgen_jaxlib_include}/xla/ffi/api/ffi.h")
    # The command on a line of its own, indented: CMake reflows the rest of
    # a message (where it breaks depends on the paths in it), not such a line.
    message(FATAL_ERROR "The XLA FFI headers come from jaxlib, which ${Python_EXECUTABLE} cannot import. "
                        "Install it into that Python:\n  \"${Python_EXECUTABLE}\" -m pip install jaxlib\n"
                        "or set OPGEN_XLA_FFI_INCLUDE_DIR to a folder that holds xla/ffi/api/ffi.h.")
  endif()
  # Not cached: pip's isolated build environments come and go between builds.
  set(OPGEN_XLA_FFI_INCLUDE_DIR "${opgen_jaxlib_include}")
endif()
message(STATUS "opgen: XLA FFI headers from ${OPGEN_XLA_FFI_INCLUDE_DIR}")

# --- CUDA ------------------------------------------------------------------
set(OPGEN_WITH_CUDA OFF)
if(NOT OPGEN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere and Hopper machine code, plus PTX for newer chips.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(OPGEN_WITH_CUDA ON)
  elseif(OPGEN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "OPGEN_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "opgen: CUDA ${OPGEN_WITH_CUDA}")

# --- PyTorch (stable ABI: headers and the shim of the installed torch) ------
set(OPGEN_WITH_TORCH OFF)
if(NOT OPGEN_TORCH STREQUAL "OFF" AND OPGEN_TORCH_DIR)
  # A torch package folder, read, not imported (it may be another Python's).
  file(STRINGS "${OPGEN_TORCH_DIR}/version.py" opgen_torch_version REGEX "^__version__ = ")
  string(REGEX MATCH "[0-9]+\\.[0-9]+" opgen_torch_version "${opgen_torch_version}")
  if(NOT opgen_torch_version OR opgen_torch_version VERSION_LESS OPGEN_MIN_TORCH)
    message(FATAL_ERROR "OPGEN_TORCH_DIR=${OPGEN_TORCH_DIR} holds no torch >= ${OPGEN_MIN_TORCH} (version.py)")
  endif()
  set(opgen_torch_probe "${OPGEN_TORCH_DIR};${opgen_torch_version}")  # as the import's probe prints it
  set(opgen_torch_found 0)
elseif(NOT OPGEN_TORCH STREQUAL "OFF")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import os, torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); assert v >= tuple(int(x) for x in '${OPGEN_MIN_TORCH}'.split('.')), torch.__version__; print(os.path.dirname(torch.__file__) + ';' + '.'.join(map(str, v)))"
    OUTPUT_VARIABLE opgen_torch_probe OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE opgen_torch_found ERROR_QUIET)
endif()
if(NOT OPGEN_TORCH STREQUAL "OFF")
  if(opgen_torch_found EQUAL 0)
    set(OPGEN_WITH_TORCH ON)
    list(GET opgen_torch_probe 0 opgen_torch_dir)
    list(GET opgen_torch_probe 1 OPGEN_TORCH_VERSION)
    set(OPGEN_TORCH_INCLUDE_DIR "${opgen_torch_dir}/include")
    set(OPGEN_TORCH_LIB_DIR "${opgen_torch_dir}/lib")
  elseif(OPGEN_TORCH STREQUAL "ON")
    message(FATAL_ERROR "OPGEN_TORCH=ON but ${Python_EXECUTABLE} cannot import torch >= ${OPGEN_MIN_TORCH}")
  endif()
endif()
message(STATUS "opgen: PyTorch kernels ${OPGEN_WITH_TORCH}")
# The eager route around torch's dispatcher (opgen/torch_eager.h) reads DLPack's
# C exchange API, which torch's headers have from torch 2.10.
set(OPGEN_WITH_TORCH_EAGER OFF)
if(OPGEN_WITH_TORCH AND EXISTS "${OPGEN_TORCH_INCLUDE_DIR}/ATen/dlpack.h")
  file(STRINGS "${OPGEN_TORCH_INCLUDE_DIR}/ATen/dlpack.h" opgen_exchange_api REGEX "typedef struct DLPackExchangeAPI ")
  if(opgen_exchange_api)
    set(OPGEN_WITH_TORCH_EAGER ON)
  endif()
endif()
message(STATUS "opgen: eager PyTorch route around the dispatcher ${OPGEN_WITH_TORCH_EAGER}")

# --- The runtime every package links -----------------------------------------
if(NOT TARGET opgen_runtime)
  add_library(opgen_runtime STATIC
    "${OPGEN_RUNTIME_DIR}/src/binder.cc"
    "${OPGEN_RUNTIME_DIR}/src/dtypes.cc"
    "${OPGEN_RUNTIME_DIR}/src/footprint.cc"
    "${OPGEN_RUNTIME_DIR}/src/opaque.cc"
    "${OPGEN_RUNTIME_DIR}/src/shape_check.cc"
    "${OPGEN_RUNTIME_DIR}/src/shape_source.cc"
    "${OPGEN_RUNTIME_DIR}/src/xla_legacy_status.cc"
    "${OPGEN_RUNTIME_DIR}/src/xla_targets.cc")
  target_include_directories(opgen_runtime PUBLIC "${OPGEN_RUNTIME_DIR}/include")
  set_target_properties(opgen_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_features(opgen_runtime PUBLIC cxx_std_17)
  target_link_libraries(opgen_runtime PUBLIC ${CMAKE_DL_LIBS})
endif()
