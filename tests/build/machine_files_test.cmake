# The purity check picks the state machines by folder and name (cmake/machine_files.cmake):
# in a tree made here, a new file under actors/ that nobody listed is checked and refused,
# while the CAF shells, the planner and the shells' helpers are left alone.
#   cmake -DSRC=<source dir> -DWORK=<scratch dir> -P machine_files_test.cmake
cmake_policy(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
# name -> contents; every file but pure_step.hpp and the machine's own breaks a rule.
set(_clock "double now_s() { return std::chrono::steady_clock::now().time_since_epoch().count(); }")
file(WRITE ${WORK}/actors/pool/pool_actor.cpp "#include <caf/all.hpp>\nvoid a() { caf::actor x; }\n")
file(WRITE ${WORK}/actors/pool/pool_actor_types.hpp "using pool_actor = caf::typed_actor<>;\n")
file(WRITE ${WORK}/actors/pool/pool_machine.hpp "#include <map>\n")
file(WRITE ${WORK}/actors/pool/new_step.cpp "#include \"actors/pool/pool_machine.hpp\"\n${_clock}\n")
file(WRITE ${WORK}/actors/pool/pure_step.hpp "#include \"actors/pool/pool_machine.hpp\"\n")
file(WRITE ${WORK}/actors/pool/uses_shell.cpp "// Reaches into the shell.\n#include \"actors/pool/pool_actor.hpp\"\n")
file(WRITE ${WORK}/actors/planner/line_sim.cpp "#include <random>\n${_clock}\n")
file(WRITE ${WORK}/actors/supervisor/supervisor.cpp "#include <caf/all.hpp>\n")
file(WRITE ${WORK}/actors/coordinator/input_maker.cpp "#include <cstdio>\n")
file(WRITE ${WORK}/actors/context.hpp "#include <atomic>\n")

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -DSTAMP=${WORK}/stamp
                        -P ${SRC}/cmake/machine_purity.cmake
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
set(_problems "")
if(_rc EQUAL 0)
  string(APPEND _problems "\n  the check passed a tree with an impure machine file")
endif()
foreach(_want "actors/pool/new_step.cpp:2: reads a clock"
              "actors/pool/uses_shell.cpp:2: includes a shell's file")
  string(FIND "${_out}" "${_want}" _at)
  if(_at EQUAL -1)
    string(APPEND _problems "\n  not refused: ${_want}")
  endif()
endforeach()
foreach(_shell pool_actor.cpp pool_actor_types.hpp pool_machine.hpp pure_step.hpp line_sim.cpp
               supervisor.cpp input_maker.cpp context.hpp)
  string(FIND "${_out}" "/${_shell}:" _at)
  if(NOT _at EQUAL -1)
    string(APPEND _problems "\n  checked, but it is a shell's or pure: ${_shell}")
  endif()
endforeach()
if(_problems)
  message(FATAL_ERROR "machine selection:${_problems}\nthe check said:\n${_out}")
endif()
message(STATUS "machine selection: new_step.cpp and uses_shell.cpp refused, shells left alone")
