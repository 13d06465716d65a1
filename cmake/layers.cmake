# txmq_layer(NAME [DEPENDS lower layers...] SOURCES files...): one folder of src/ as a static,
# position-independent library that links only the layers below it. cmake/library.cmake puts
# every layer's objects into txmq and txmq_shared.
function(txmq_layer name)
  cmake_parse_arguments(LAYER "" "" "DEPENDS;SOURCES" ${ARGN})
  add_library(${name} STATIC ${LAYER_SOURCES})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_features(${name} PUBLIC cxx_std_20)
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${LAYER_DEPENDS} Threads::Threads
                        PRIVATE PkgConfig::MARIADB fmt::fmt)
  target_compile_options(${name} PRIVATE ${TXMQ_WARNINGS})
endfunction()
