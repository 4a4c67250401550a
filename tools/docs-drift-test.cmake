# docs.generated.detects_drift: lazymalloc-gen-docs --check must fail on a
# copy of the documents whose options table has one row changed, and must
# pass on an unchanged copy (so the failure is the changed row's doing).
#   cmake -DGEN=... -DSOURCE_DIR=... -DWORK_DIR=... -P docs-drift-test.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/docs)
foreach(f README.md docs/options.md docs/stats.md)
  configure_file(${SOURCE_DIR}/${f} ${WORK_DIR}/${f} COPYONLY)
endforeach()

execute_process(COMMAND ${GEN} --check ${WORK_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--check fails on an unchanged copy (run docs.generated first):\n${err}")
endif()

file(READ ${WORK_DIR}/docs/options.md doc)
string(REPLACE "| `decay_ms` |" "| `decay_ms_changed` |" changed "${doc}")
if(changed STREQUAL doc)
  message(FATAL_ERROR "docs/options.md has no row for decay_ms to change")
endif()
file(WRITE ${WORK_DIR}/docs/options.md "${changed}")
execute_process(COMMAND ${GEN} --check ${WORK_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "--check passed although docs/options.md differs from the table")
endif()
foreach(expected "docs/options.md is out of date" "--target update-docs")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--check output lacks '${expected}':\n${err}")
  endif()
endforeach()
string(FIND "${err}" "README.md" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "--check blames README.md, which was not changed:\n${err}")
endif()

# --update repairs the copy.
execute_process(COMMAND ${GEN} --update ${WORK_DIR} RESULT_VARIABLE rc)
execute_process(COMMAND ${GEN} --check ${WORK_DIR} RESULT_VARIABLE rc2 ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "--update did not bring the copy up to date:\n${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
