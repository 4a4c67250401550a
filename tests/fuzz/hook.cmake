# Used by tests/fuzz/run.sh only: -DCMAKE_PROJECT_lazymalloc_INCLUDE=<this>
# runs this file right after project(lazymalloc); it defers adding tests/fuzz
# to the end of the top-level CMakeLists.txt (after src/ defined
# lazymalloc_api), so run.sh works whether or not tests/CMakeLists.txt has
# add_subdirectory(fuzz) and without building the other tests.
function(lazymalloc_fuzz_hook)
  if(NOT TARGET fuzz_malloc)
    # (deferred code may not create subdirectories: include the file instead;
    # it refers to its own directory through CMAKE_CURRENT_LIST_DIR)
    include(${CMAKE_SOURCE_DIR}/tests/fuzz/CMakeLists.txt)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL lazymalloc_fuzz_hook)
