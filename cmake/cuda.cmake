# cuda.cmake — the optional CUDA backend (src/backend/cuda/*.cu).
#
# EMBER_CUDA=AUTO builds it when nvcc is found (on PATH, via CUDACXX, or in
# /usr/local/cuda), ON requires it, OFF skips it. Code is built for Hopper
# (sm_90 machine code) plus compute_90 PTX that newer GPUs compile at load;
# EMBER_CUDA_ARCHS overrides the list (CMake CUDA_ARCHITECTURES syntax).
# cuBLAS is loaded at run time (no link dependency); the CUDA runtime is
# linked statically. Sets EMBER_CUDA_OBJECTS / EMBER_CUDA_LIBS for libember and defines
# EMBER_HAVE_CUDA for the C code that selects the backend.

set(EMBER_CUDA_ARCHS "90-real;90-virtual" CACHE STRING "CUDA architectures for the CUDA backend")
set(EMBER_CUDA_OBJECTS "")
set(EMBER_CUDA_LIBS "")
set(EMBER_HAVE_CUDA OFF)

if(NOT EMBER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(EMBER_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(EMBER_NVCC)
      set(CMAKE_CUDA_COMPILER ${EMBER_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  # Architecture detection would probe with nvcc's default target; name ours.
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${EMBER_CUDA_ARCHS})
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(EMBER_HAVE_CUDA ON)
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but no CUDA compiler (nvcc) was found; set CUDACXX or use -DEMBER_CUDA=OFF")
  endif()
endif()

if(EMBER_HAVE_CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB EMBER_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
  add_library(ember_cuda OBJECT ${EMBER_CUDA_SOURCES})
  set_target_properties(ember_cuda PROPERTIES CUDA_ARCHITECTURES "${EMBER_CUDA_ARCHS}" POSITION_INDEPENDENT_CODE ON)
  target_include_directories(ember_cuda PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(ember_cuda PRIVATE _GNU_SOURCE EMBER_HAVE_CUDA=1)
  # Warnings as errors in host code too; no fast-math: the kernels keep the
  # f32 arithmetic of the CPU backend (accurate expf, cosf, sinf).
  target_compile_options(ember_cuda PRIVATE -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
  if(EMBER_WERROR)
    target_compile_options(ember_cuda PRIVATE -Werror=all-warnings)
  endif()
  # cuBLAS is opened at run time (src/backend/cuda/cuda_blas.cu): linked,
  # its libraries would add ~150 MB to every process, CPU-only runs too.
  # The CUDA runtime is linked statically for the same reason.
  find_library(EMBER_CUBLAS_LIBRARY cublas HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(EMBER_CUBLAS_LIBRARY)
    get_filename_component(EMBER_CUBLAS_REAL ${EMBER_CUBLAS_LIBRARY} REALPATH)
    target_compile_definitions(ember_cuda PRIVATE EMBER_CUBLAS_PATH="${EMBER_CUBLAS_REAL}")
  endif()
  target_include_directories(ember_cuda PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(ember_obj PUBLIC EMBER_HAVE_CUDA=1)
  set(EMBER_CUDA_OBJECTS $<TARGET_OBJECTS:ember_cuda>)
  set(EMBER_CUDA_LIBS CUDA::cudart_static ${CMAKE_DL_LIBS})
  message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${EMBER_CUDA_ARCHS})")
else()
  message(STATUS "CUDA backend: off")
endif()
