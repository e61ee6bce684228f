# The operator's first day, as the docs tell it (run with -DSRC=<source dir>): the README
# goes from the demo to one's own hosts and links the docs that path needs; install.md
# makes the keys before it installs the config that names them; config.md lists every
# backend type the config accepts.
set(_problems "")
macro(need file text why)
  string(FIND "${${file}}" "${text}" _at)
  if(_at EQUAL -1)
    string(APPEND _problems "  ${file}: lacks '${text}' (${why})\n")
  endif()
endmacro()

file(READ ${SRC}/README.md README)
file(READ ${SRC}/docs/install.md install)
file(READ ${SRC}/docs/config.md config)

# The newcomer's two commands, and no third launch/ script in the README.
string(REGEX MATCHALL "launch/[a-z_]+" _launch "${README}")
list(REMOVE_DUPLICATES _launch)
if(NOT _launch STREQUAL "launch/demo;launch/test")
  string(APPEND _problems "  README.md: names the launch scripts '${_launch}', not launch/demo and launch/test\n")
endif()
foreach(step "vidline keygen" "vidline config-adapt" "vidline start" "vidline preflight"
             "vidline run" "/dashboard/" "docs/http.md" "docs/install.md" "docs/backends.md"
             "docs/worker.md")
  need(README "${step}" "the way from the demo to one's own hosts")
endforeach()

string(FIND "${install}" "vidline keygen" _keygen)
string(FIND "${install}" "/etc/vidline/cluster.json   #" _config)
if(_keygen EQUAL -1 OR _config EQUAL -1 OR _keygen GREATER _config)
  string(APPEND _problems "  docs/install.md: keygen must come before cluster.json is installed (the config names the public keys)\n")
endif()

string(REGEX MATCH "\\| `type` \\| string \\| yes \\| \\| [^\n]*" _types "${config}")
foreach(t sim exec worker comfyui)
  string(FIND "${_types}" "`${t}`" _at)
  if(_at EQUAL -1)
    string(APPEND _problems "  docs/config.md: the backend types lack `${t}`\n")
  endif()
endforeach()

if(_problems)
  message(FATAL_ERROR "the first day's docs:\n${_problems}")
endif()
message(STATUS "the first day's docs hold")
