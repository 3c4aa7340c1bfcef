# rekindle_add_component(<name> SOURCES ... [DEPENDS ...] [PRIVATE_DEPENDS ...] [TEST_DEPENDS ...])
#
# Builds the library rekindle::<name> from the folder <name>/ and registers its tests: every
# tests/<label>/<name>/*_test.cpp (label: unit, integration, fault, gpu, multihost) becomes one test binary
# <name>_<label>_test whose GoogleTest cases are CTest tests labelled <label>.
#
# rekindle_add_executable(<target> SOURCES ... DEPENDS ...) builds a program with the same flags.

add_library(rekindle_flags INTERFACE)
target_compile_features(rekindle_flags INTERFACE cxx_std_20)
target_include_directories(rekindle_flags INTERFACE "${PROJECT_SOURCE_DIR}" "${PROJECT_BINARY_DIR}/generated")
target_compile_options(rekindle_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>
  # GCC 12 reports std::variant members moved at -O2 as maybe-uninitialized (false positives).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
if(REKINDLE_WERROR)
  target_compile_options(rekindle_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(REKINDLE_SANITIZERS)
  target_compile_options(rekindle_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(rekindle_flags INTERFACE -fsanitize=address,undefined)
endif()
target_compile_definitions(rekindle_flags INTERFACE
  REKINDLE_VERSION="${PROJECT_VERSION}"
  $<$<BOOL:${REKINDLE_CUDA_ENABLED}>:REKINDLE_WITH_CUDA=1>)

set(REKINDLE_TEST_LABELS unit integration fault gpu multihost)
# Seconds a single test may run before CTest kills it; integration and fault tests wait on
# events with generous deadlines, never on speed.
set(REKINDLE_TEST_TIMEOUT_unit 60)
set(REKINDLE_TEST_TIMEOUT_integration 300)
set(REKINDLE_TEST_TIMEOUT_fault 300)
set(REKINDLE_TEST_TIMEOUT_gpu 300)
# Multi-host tests run a failure-free reference and then a job through network faults.
set(REKINDLE_TEST_TIMEOUT_multihost 600)

function(rekindle_add_tests name)
  cmake_parse_arguments(ARG "" "" "DEPENDS" ${ARGN})
  if(NOT REKINDLE_BUILD_TESTS)
    return()
  endif()
  foreach(label IN LISTS REKINDLE_TEST_LABELS)
    file(GLOB test_sources CONFIGURE_DEPENDS
      "${PROJECT_SOURCE_DIR}/tests/${label}/${name}/*_test.cpp"
      "${PROJECT_SOURCE_DIR}/tests/${label}/${name}/*_test.cu")
    if(NOT test_sources)
      continue()
    endif()
    if(label STREQUAL "gpu" AND NOT REKINDLE_CUDA_ENABLED)
      continue()
    endif()
    set(target ${name}_${label}_test)
    add_executable(${target} ${test_sources})
    target_link_libraries(${target} PRIVATE rekindle_flags rekindle::test_support ${ARG_DEPENDS}
      GTest::gtest_main GTest::gmock)
    # Fault tests start many processes and measure detection by deadlines: one at a time, so a
    # 2-core machine does not starve their heartbeats.
    set(serial FALSE)
    if(label STREQUAL "fault" OR label STREQUAL "multihost")
      set(serial TRUE)
    endif()
    gtest_discover_tests(${target}
      TEST_PREFIX "${name}."
      DISCOVERY_MODE PRE_TEST
      DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS ${label} TIMEOUT ${REKINDLE_TEST_TIMEOUT_${label}} RUN_SERIAL ${serial}
      WORKING_DIRECTORY "${PROJECT_BINARY_DIR}")
  endforeach()
endfunction()

function(rekindle_add_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS;TEST_DEPENDS" ${ARGN})
  add_library(rekindle_${name} ${ARG_SOURCES})
  set_property(GLOBAL APPEND PROPERTY REKINDLE_COMPONENTS ${name})
  add_library(rekindle::${name} ALIAS rekindle_${name})
  set_target_properties(rekindle_${name} PROPERTIES OUTPUT_NAME rekindle_${name}
    POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(rekindle_${name} PUBLIC rekindle_flags ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  rekindle_add_tests(${name} DEPENDS rekindle::${name} ${ARG_TEST_DEPENDS})
endfunction()

# Records a backend for the configure summary, e.g. rekindle_add_backend("collectives: UCX ring").
function(rekindle_add_backend text)
  set_property(GLOBAL APPEND PROPERTY REKINDLE_BACKENDS "${text}")
endfunction()

function(rekindle_add_executable target)
  cmake_parse_arguments(ARG "" "OUTPUT_NAME" "SOURCES;DEPENDS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE rekindle_flags ${ARG_DEPENDS})
  if(ARG_OUTPUT_NAME)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
endfunction()
