# `cmake --install` puts headers, the library and actorflowConfig.cmake under
# the prefix, so an application does find_package(actorflow) and links
# actorflow::actorflow.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ACTORFLOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/actorflow)

install(TARGETS actorflow EXPORT actorflowTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The public headers only, included as <actorflow/...> (cmake/install_headers.cmake).
install(CODE "
  set(AF_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(AF_GENERATED_DIR \"${CAPNPC_OUTPUT_DIR}\")
  set(AF_INCLUDE_DIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_headers.cmake\")
")
install(TARGETS ${ACTORFLOW_APP_TARGETS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake DESTINATION ${ACTORFLOW_CMAKE_DIR})
install(EXPORT actorflowTargets NAMESPACE actorflow:: DESTINATION ${ACTORFLOW_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/actorflowConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/actorflowConfig.cmake
                              INSTALL_DESTINATION ${ACTORFLOW_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actorflowConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/actorflowConfig.cmake
              ${PROJECT_BINARY_DIR}/actorflowConfigVersion.cmake
        DESTINATION ${ACTORFLOW_CMAKE_DIR})
