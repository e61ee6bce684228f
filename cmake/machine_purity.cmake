# Fails when a state machine's source or header reads a clock, opens a file, starts a
# thread, draws randomness, logs or touches a socket or an actor: the machines get all of
# that injected as events and give it back as effects.
#
#   cmake -DROOT=<source dir> -DSTAMP=<file> -P machine_purity.cmake
#       checks the machine files chosen by cmake/machine_files.cmake under ROOT;
#   cmake -DLIST=<file> -DSTAMP=<file> [-DROOT=<source dir>] -P machine_purity.cmake
#       checks the files named in LIST, one path per line.
#
# Beside the standard library's I/O it refuses the project's own: an include of node or
# backend code, of a shell's file under actors/, or of a header of common/, config/ or
# messages/ that does I/O itself (for common/, its .cpp too), followed as deep as they go;
# and a call into the I/O helpers (files::, metrics::, crash::, a file's digest, logs).
# ROOT defaults to the tree this script is in. Writes "ok" to STAMP when all pass.

cmake_policy(VERSION 3.20)
if(NOT ROOT)
  get_filename_component(ROOT ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/machine_files.cmake)
# What a machine may include from actors/: another machine's file.
set(_machine_set)
vidline_machine_files(_relative ${ROOT})
foreach(f IN LISTS _relative)
  list(APPEND _machine_set ${ROOT}/${f})
endforeach()
if(LIST)
  file(STRINGS ${LIST} _files)
  list(APPEND _machine_set ${_files})
else()
  set(_files ${_machine_set})
endif()

set(_rules
  "_clock::now|reads a clock (time comes in as 'now')"
  "[^_a-z]time\\(|reads a clock (time comes in as 'now')"
  "#include <(fstream|filesystem|thread|random|mutex|future|atomic|ctime)>|includes a header of files, threads, randomness or clocks"
  "#include <(unistd\\.h|fcntl\\.h|sys/[a-z]+\\.h|cstdio|iostream)>|includes a system I/O header"
  "(fopen|ifstream|ofstream|std::filesystem|getenv|spdlog|zmq|caf::)|does I/O or uses the actor system"
  "(std::(cout|cerr|clog)|[^_a-z]f?printf\\(|[^_a-z]puts\\(|perror\\()|writes to a terminal (a log line is an effect)"
  "([^_a-z](files|metrics|crash)::|sha256_file_hex)|uses the project's I/O helpers (files, metrics, crash points)")

# A problem on the current line of _purity_scan: what is wrong and where it starts. A
# file's own problem (`own` true) is named as its cause before one it inherits through an
# include.
macro(_purity_problem why where own)
  string(APPEND _found "${_n}: ${why}: ${_line}\n")
  if(${own} AND NOT _cause)
    set(_cause "${where}")
  elseif(NOT _inherited)
    set(_inherited "${where}")
  endif()
endmacro()

# Sets `out` to the problems of file `f`, one "LINE: WHY: TEXT" per line, and `cause` to
# where its first problem starts ("FILE:LINE: WHY", an include followed to its end);
# includes of the project's headers are followed (each file is scanned once per run).
function(_purity_scan f out cause)
  get_property(_seen GLOBAL PROPERTY "purity:${f}" SET)
  if(_seen)
    get_property(_found GLOBAL PROPERTY "purity:${f}")
    get_property(_cause GLOBAL PROPERTY "purity-cause:${f}")
    set(${out} "${_found}" PARENT_SCOPE)
    set(${cause} "${_cause}" PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "purity:${f}" "")  # an include cycle ends here
  set_property(GLOBAL PROPERTY "purity-cause:${f}" "")
  file(RELATIVE_PATH _me ${ROOT} ${f})
  set(_found "")
  set(_cause "")
  set(_inherited "")
  file(STRINGS ${f} _lines)
  set(_n 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _n "${_n} + 1")
    if(_line MATCHES "^[ \t]*//")
      continue()
    endif()
    foreach(_rule IN LISTS _rules)
      string(FIND "${_rule}" "|" _bar REVERSE)
      string(SUBSTRING "${_rule}" 0 ${_bar} _re)
      math(EXPR _after "${_bar} + 1")
      string(SUBSTRING "${_rule}" ${_after} -1 _why)
      if(_line MATCHES "${_re}")
        _purity_problem("${_why}" "${_me}:${_n}: ${_why}" TRUE)
      endif()
    endforeach()
    if(NOT _line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      continue()
    endif()
    set(_inc "${CMAKE_MATCH_1}")
    if(_inc MATCHES "^(nodes|backends)/")
      _purity_problem("includes node or backend code, which does I/O" "${_me}:${_n}: ${_inc}" TRUE)
    elseif(_inc MATCHES "^actors/")
      if(NOT "${ROOT}/${_inc}" IN_LIST _machine_set)
        _purity_problem("includes a shell's file, not a state machine's" "${_me}:${_n}: ${_inc}" TRUE)
      endif()
    elseif(_inc MATCHES "^(common|config|messages)/")
      set(_deps ${ROOT}/${_inc})
      string(REGEX REPLACE "\\.hpp$" ".cpp" _source "${ROOT}/${_inc}")
      if(_inc MATCHES "^common/" AND EXISTS ${_source})
        list(APPEND _deps ${_source})
      endif()
      foreach(_dep IN LISTS _deps)
        if(NOT EXISTS ${_dep})
          continue()
        endif()
        _purity_scan(${_dep} _sub _sub_cause)
        if(_sub)
          _purity_problem("includes ${_inc}, which does I/O (${_sub_cause})" "${_sub_cause}" FALSE)
          break()
        endif()
      endforeach()
    endif()
  endforeach()
  if(NOT _cause)
    set(_cause "${_inherited}")
  endif()
  set_property(GLOBAL PROPERTY "purity:${f}" "${_found}")
  set_property(GLOBAL PROPERTY "purity-cause:${f}" "${_cause}")
  set(${out} "${_found}" PARENT_SCOPE)
  set(${cause} "${_cause}" PARENT_SCOPE)
endfunction()

set(_errors "")
foreach(f IN LISTS _files)
  if(NOT EXISTS ${f})
    continue()
  endif()
  _purity_scan(${f} _found _cause)
  string(REGEX REPLACE "([^\n]+)\n" "\n  ${f}:\\1" _named "${_found}")
  string(APPEND _errors "${_named}")
endforeach()
if(_errors)
  message(FATAL_ERROR "a state machine is not pure:${_errors}")
endif()
file(WRITE ${STAMP} "ok\n")
