# The package apps build on: the target troupe::troupe (every library of the runtime, for an
# app's own actors as for a training_task) and the rules `cmake --install` follows to put the
# public headers (runtime/include/troupe, without detail/), the static libraries, the binaries
# and troupeConfig.cmake under a prefix. The same target works through add_subdirectory and
# FetchContent, where it is an alias of the in-tree target.
add_library(troupe INTERFACE)
target_link_libraries(troupe INTERFACE troupe_actors)
add_library(troupe::troupe ALIAS troupe)

set(troupe_libraries troupe troupe_base troupe_kernels troupe_messages troupe_runtime
    troupe_actors)
if(TROUPE_HAVE_CUDA)
  list(APPEND troupe_libraries troupe_kernels_cuda troupe_gpu)
endif()
if(TROUPE_HAVE_TORCH)
  list(APPEND troupe_libraries troupe_torch)  # troupe::torch, beside troupe::troupe
endif()
foreach(lib IN LISTS troupe_libraries)
  string(REGEX REPLACE "^troupe_" "" exported ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${exported})
endforeach()

install(TARGETS ${troupe_libraries} EXPORT troupeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(troupe_headers_left_out PATTERN detail EXCLUDE)
if(NOT TROUPE_HAVE_TORCH)
  list(APPEND troupe_headers_left_out PATTERN torch.hpp EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/troupe
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${troupe_headers_left_out})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/base/troupe DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TROUPE_APPS)
  install(TARGETS troupe-fmnist troupe-ctr troupe-console troupe-bench
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(troupe_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${troupe_cmake_dir})
include(CMakePackageConfigHelpers)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/troupeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/troupeConfig.cmake
                              INSTALL_DESTINATION ${troupe_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/troupeConfig.cmake
              ${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${troupe_cmake_dir})
