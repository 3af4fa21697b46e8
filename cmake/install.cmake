# `cmake --install` puts headers, the library and actorflowConfig.cmake under
# the prefix, so an application does find_package(actorflow) and links
# actorflow::actorflow.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ACTORFLOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/actorflow)

install(TARGETS actorflow EXPORT actorflowTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow)
foreach(room core ops devices actors schema)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${room}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow/${room}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(DIRECTORY ${CAPNPC_OUTPUT_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow
        FILES_MATCHING PATTERN "*.h" PATTERN "version.hpp")
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
