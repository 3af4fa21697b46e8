# The CUDA build (the device in devices/cuda, the GPU kernels in ops/cuda):
# ACTORFLOW_CUDA is AUTO, ON or OFF.
#   AUTO  builds it when nvcc, the CUDA toolkit (cudart, cuBLAS) and cuDNN are found;
#   ON    builds it or stops with what is missing;
#   OFF   leaves it out (placing a node on a GPU then fails with a clear error).
# Sets ACTORFLOW_HAS_CUDA (ON/OFF) and, when ON, enables the CUDA language and
# defines the imported target actorflow::cudnn. Prints one line saying whether
# CUDA is on and why.

set(ACTORFLOW_CUDA AUTO CACHE STRING "Build the CUDA device: AUTO (when nvcc and cuDNN are found), ON or OFF")
set_property(CACHE ACTORFLOW_CUDA PROPERTY STRINGS AUTO ON OFF)
# Before the CUDA device existed, ACTORFLOW_CUDA was a BOOL option that could
# only be OFF; a build directory configured then still caches that default.
get_property(_af_cuda_type CACHE ACTORFLOW_CUDA PROPERTY TYPE)
if(_af_cuda_type STREQUAL "BOOL")
  set_property(CACHE ACTORFLOW_CUDA PROPERTY TYPE STRING)
  set_property(CACHE ACTORFLOW_CUDA PROPERTY VALUE AUTO)
endif()

string(TOUPPER "${ACTORFLOW_CUDA}" _af_cuda_mode)
if(_af_cuda_mode MATCHES "^(ON|TRUE|YES|1)$")
  set(_af_cuda_mode ON)
elseif(_af_cuda_mode MATCHES "^(OFF|FALSE|NO|0)$")
  set(_af_cuda_mode OFF)
elseif(NOT _af_cuda_mode STREQUAL "AUTO")
  message(FATAL_ERROR "ACTORFLOW_CUDA must be AUTO, ON or OFF, got '${ACTORFLOW_CUDA}'")
endif()

set(ACTORFLOW_HAS_CUDA OFF)
set(_af_cuda_why "ACTORFLOW_CUDA=OFF")
if(NOT _af_cuda_mode STREQUAL "OFF")
  # The toolkit's usual place on these machines, unless the user chose a compiler.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(_af_cuda_why "no CUDA compiler (nvcc) found; set CMAKE_CUDA_COMPILER or CUDACXX")
  else()
    # Hopper (sm_90) machine code plus PTX, which newer GPUs compile at load time.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
    endif()
    enable_language(CUDA)
    # C++20 for nvcc too. CMake before 3.26 knows no flag for it ("CUDA20 ...
    # CMake does not know the flags"); nvcc 12+ takes -std=c++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # One CUDA runtime for the whole process: the shared one, as CUDA::cudart.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas)
      set(_af_cuda_why "nvcc found at ${CMAKE_CUDA_COMPILER}, but not the CUDA toolkit's cudart and cuBLAS")
    else()
      get_filename_component(_af_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
      find_library(ACTORFLOW_CUDNN_LIBRARY cudnn
                   HINTS ${CUDAToolkit_LIBRARY_DIR} ${_af_cuda_root}/lib64 ${_af_cuda_root}/lib)
      find_path(ACTORFLOW_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      if(NOT ACTORFLOW_CUDNN_LIBRARY OR NOT ACTORFLOW_CUDNN_INCLUDE_DIR)
        set(_af_cuda_why "CUDA ${CUDAToolkit_VERSION} found, but not cuDNN (libcudnn and cudnn.h, looked in ${CUDAToolkit_LIBRARY_DIR} and ${CUDAToolkit_INCLUDE_DIRS})")
      else()
        set(_af_cudnn_version "?")
        if(EXISTS "${ACTORFLOW_CUDNN_INCLUDE_DIR}/cudnn_version.h")
          file(STRINGS "${ACTORFLOW_CUDNN_INCLUDE_DIR}/cudnn_version.h" _af_cudnn_defs
               REGEX "^#define CUDNN_(MAJOR|MINOR) ")
          string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*" "\\1.\\2"
                 _af_cudnn_version "${_af_cudnn_defs}")
        endif()
        add_library(actorflow::cudnn UNKNOWN IMPORTED)
        set_target_properties(actorflow::cudnn PROPERTIES
          IMPORTED_LOCATION "${ACTORFLOW_CUDNN_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${ACTORFLOW_CUDNN_INCLUDE_DIR}")
        set(ACTORFLOW_HAS_CUDA ON)
        set(_af_cuda_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION}, cuDNN ${_af_cudnn_version}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
      endif()
    endif()
  endif()
  if(_af_cuda_mode STREQUAL "ON" AND NOT ACTORFLOW_HAS_CUDA)
    message(FATAL_ERROR "ACTORFLOW_CUDA=ON, but ${_af_cuda_why}")
  endif()
endif()

if(ACTORFLOW_HAS_CUDA)
  message(STATUS "actorflow CUDA device: ON (${_af_cuda_why})")
else()
  message(STATUS "actorflow CUDA device: OFF (${_af_cuda_why})")
endif()
