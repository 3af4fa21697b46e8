# The library behind float GEMM on the CPU: ACTORFLOW_GEMM is AUTO, ONEDNN or EIGEN.
#   AUTO    oneDNN's sgemm when libdnnl-dev is installed, Eigen otherwise;
#   ONEDNN  oneDNN or stop, naming what is missing;
#   EIGEN   Eigen's product only.
# oneDNN's sgemm is the fastest float GEMM of this machine's Debian packages
# (actorflow-bench --only gemm measures them all side by side). Sets
# ACTORFLOW_HAS_ONEDNN and defines actorflow::onednn when it is ON; prints one line.

set(ACTORFLOW_GEMM AUTO CACHE STRING "CPU float GEMM: AUTO (oneDNN when found), ONEDNN or EIGEN")
set_property(CACHE ACTORFLOW_GEMM PROPERTY STRINGS AUTO ONEDNN EIGEN)
string(TOUPPER "${ACTORFLOW_GEMM}" _af_gemm_mode)
if(NOT _af_gemm_mode MATCHES "^(AUTO|ONEDNN|EIGEN)$")
  message(FATAL_ERROR "ACTORFLOW_GEMM must be AUTO, ONEDNN or EIGEN, got '${ACTORFLOW_GEMM}'")
endif()

set(ACTORFLOW_HAS_ONEDNN OFF)
if(NOT _af_gemm_mode STREQUAL "EIGEN")
  find_path(ACTORFLOW_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(ACTORFLOW_DNNL_LIBRARY dnnl)
  # oneDNN's parallel runtime is OpenMP in Debian's build: gemm calls set one
  # OpenMP thread on the calling thread (devices/cpu/gemm_library.cpp).
  find_package(OpenMP QUIET COMPONENTS CXX)
  if(ACTORFLOW_DNNL_INCLUDE_DIR AND ACTORFLOW_DNNL_LIBRARY AND OpenMP_CXX_FOUND)
    set(ACTORFLOW_HAS_ONEDNN ON)
    add_library(actorflow::onednn INTERFACE IMPORTED)
    set_target_properties(actorflow::onednn PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${ACTORFLOW_DNNL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${ACTORFLOW_DNNL_LIBRARY};${OpenMP_gomp_LIBRARY}")
  elseif(_af_gemm_mode STREQUAL "ONEDNN")
    message(FATAL_ERROR "ACTORFLOW_GEMM=ONEDNN but oneDNN was not found "
                        "(header ${ACTORFLOW_DNNL_INCLUDE_DIR}, library ${ACTORFLOW_DNNL_LIBRARY}, "
                        "OpenMP ${OpenMP_CXX_FOUND}): apt-get install libdnnl-dev")
  endif()
endif()
if(ACTORFLOW_HAS_ONEDNN)
  message(STATUS "actorflow CPU GEMM: oneDNN (${ACTORFLOW_DNNL_LIBRARY})")
else()
  message(STATUS "actorflow CPU GEMM: Eigen (ACTORFLOW_GEMM=${ACTORFLOW_GEMM}; oneDNN: libdnnl-dev)")
endif()
