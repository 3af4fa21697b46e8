# TensorFlow Serving's gRPC API (schema/tf_serving): its .proto files, kept at
# TensorFlow's paths below schema/tf_serving so that the packages, imports
# and generated headers are TF Serving's own, compiled with Debian's protoc
# and grpc_cpp_plugin into the build tree. Defines the static library
# actorflow_tf_serving_protos, which carries gRPC++, protobuf and the
# generated headers (#include <tensorflow_serving/apis/predict.pb.h>).
# Included from apps/CMakeLists.txt: a custom command's outputs build only in
# a target of the command's own folder.
find_package(gRPC CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_program(ACTORFLOW_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

set(_tfs_root ${PROJECT_SOURCE_DIR}/schema/tf_serving)
set(_tfs_out ${PROJECT_BINARY_DIR}/tf_serving_generated)
# The messages, then the files that declare services (their stubs too).
set(_tfs_messages
  tensorflow/core/framework/types.proto
  tensorflow/core/framework/tensor_shape.proto
  tensorflow/core/framework/tensor.proto
  tensorflow/core/protobuf/error_codes.proto
  tensorflow/core/protobuf/meta_graph.proto
  tensorflow_serving/apis/model.proto
  tensorflow_serving/apis/predict.proto
  tensorflow_serving/apis/get_model_metadata.proto
  tensorflow_serving/apis/status.proto
  tensorflow_serving/apis/get_model_status.proto)
set(_tfs_services
  tensorflow_serving/apis/prediction_service.proto
  tensorflow_serving/apis/model_service.proto)

set(_tfs_all_protos "")
foreach(proto IN LISTS _tfs_messages _tfs_services)
  list(APPEND _tfs_all_protos ${_tfs_root}/${proto})
endforeach()
set(_tfs_sources "")
foreach(proto IN LISTS _tfs_messages _tfs_services)
  string(REGEX REPLACE "\\.proto$" "" stem ${proto})
  set(outputs ${_tfs_out}/${stem}.pb.cc ${_tfs_out}/${stem}.pb.h)
  set(grpc_args "")
  if(proto IN_LIST _tfs_services)
    list(APPEND outputs ${_tfs_out}/${stem}.grpc.pb.cc ${_tfs_out}/${stem}.grpc.pb.h)
    set(grpc_args --grpc_out=${_tfs_out} --plugin=protoc-gen-grpc=${ACTORFLOW_GRPC_CPP_PLUGIN})
  endif()
  # Every proto as a dependency: a changed import regenerates its users.
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_tfs_out}
    COMMAND protobuf::protoc -I ${_tfs_root} --cpp_out=${_tfs_out} ${grpc_args}
            ${_tfs_root}/${proto}
    DEPENDS ${_tfs_all_protos} protobuf::protoc
    COMMENT "protoc ${proto}"
    VERBATIM)
  list(APPEND _tfs_sources ${outputs})
endforeach()

add_library(actorflow_tf_serving_protos STATIC ${_tfs_sources})
# Generated code is protoc's, not ours: the project's warnings are not for it,
# and SYSTEM keeps its headers' warnings out of the files that include them.
set_source_files_properties(${_tfs_sources} PROPERTIES COMPILE_OPTIONS "-w")
target_include_directories(actorflow_tf_serving_protos SYSTEM PUBLIC ${_tfs_out})
# Abseil's synchronization: apps/lib/serve_grpc.cpp turns its deadlock detection off.
target_link_libraries(actorflow_tf_serving_protos PUBLIC gRPC::grpc++ protobuf::libprotobuf
  absl::synchronization)
