# Fails when a state machine's source or header (one path per line in the file LIST) reads a clock, opens
# a file, starts a thread, draws randomness, logs or touches a socket or an actor: the
# machines get all of that injected as events and give it back as effects.
file(STRINGS ${LIST} _files)
set(_rules
  "_clock::now|reads a clock (time comes in as 'now')"
  "[^_a-z]time\\(|reads a clock (time comes in as 'now')"
  "#include <(fstream|filesystem|thread|random|mutex|future|atomic|ctime)>|includes a header of files, threads, randomness or clocks"
  "#include <(unistd\\.h|fcntl\\.h|sys/[a-z]+\\.h|cstdio)>|includes a system I/O header"
  "(fopen|ifstream|ofstream|std::filesystem|getenv|spdlog|zmq|caf::)|does I/O or uses the actor system")
set(_errors "")
foreach(f ${_files})
  if(NOT EXISTS ${f})
    continue()
  endif()
  file(STRINGS ${f} _lines)
  set(_n 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _n "${_n} + 1")
    if(_line MATCHES "^[ \t]*//")
      continue()
    endif()
    foreach(_rule ${_rules})
      string(FIND "${_rule}" "|" _bar REVERSE)
      string(SUBSTRING "${_rule}" 0 ${_bar} _re)
      math(EXPR _after "${_bar} + 1")
      string(SUBSTRING "${_rule}" ${_after} -1 _why)
      if(_line MATCHES "${_re}")
        string(APPEND _errors "\n  ${f}:${_n}: ${_why}: ${_line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(_errors)
  message(FATAL_ERROR "a state machine is not pure:${_errors}")
endif()
file(WRITE ${STAMP} "ok\n")
