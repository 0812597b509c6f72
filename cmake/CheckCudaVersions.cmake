# Purpose: stop a configure whose nvcc is of another CUDA major version than the torch it links (the
# kernels would need a CUDA runtime the torch wheel does not load). Included by CMakeLists.txt, or
# run alone (`cmake -DNVCC_VERSION=.. -DTORCH_CUDA=.. -P`) by the test of this check.
function(exprun_check_cuda_versions nvcc_version torch_cuda)
  if(NOT nvcc_version OR NOT torch_cuda)
    return()
  endif()
  string(REGEX MATCH "^[0-9]+" nvcc_major "${nvcc_version}")
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
  if(NOT nvcc_major STREQUAL torch_major)
    message(FATAL_ERROR "exprun: nvcc is CUDA ${nvcc_version} but torch was built with CUDA ${torch_cuda}: the "
                        "major versions must match. Point CMAKE_CUDA_COMPILER at a CUDA ${torch_major} nvcc, or "
                        "configure with -DEXPRUN_CUDA=OFF to build without exprun's CUDA parts.")
  endif()
endfunction()

# torch's CUDA version, from the wheel's torch/version.py beside its CMake files ("" when unknown).
function(exprun_torch_cuda_version torch_dir out)
  set(${out} "" PARENT_SCOPE)
  set(version_py "${torch_dir}/../../../version.py")
  if(EXISTS "${version_py}")
    file(STRINGS "${version_py}" line REGEX "^cuda")
    if(line MATCHES "'([0-9.]+)'")
      set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED NVCC_VERSION)
  exprun_check_cuda_versions("${NVCC_VERSION}" "${TORCH_CUDA}")
  message(STATUS "exprun: nvcc CUDA ${NVCC_VERSION} and torch's CUDA ${TORCH_CUDA} agree")
endif()
