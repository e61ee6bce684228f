# Which files are the pure state machines, chosen by folder and name so that a new file is
# checked without anyone adding it to a list (docs/design.md, "Layers").
#
# Every .cpp and .hpp under actors/ belongs to a machine, except the shells around them:
#   - a role's CAF actor and its contract: files whose name holds "_actor"
#     (pool_actor.cpp, coordinator_actor.hpp, ...);
#   - the folders that are shell only: actors/supervisor/ (CAF monitors, no machine) and
#     actors/planner/ (the offline planner: it drives the machines on simulated time and
#     reports how long it took itself);
#   - the shells' helpers in VIDLINE_SHELL_HELPERS, each with what it does.
# A file that is none of these is a machine's: the build checks it (machine_purity.cmake)
# and compiles it into vidline_machines, where a CAF or ZeroMQ header is an #error.
# Used by CMakeLists.txt and, in script mode, by cmake/machine_purity.cmake (ROOT=...).

# The shells' helpers, by path without extension (both the .hpp and the .cpp are shell).
set(VIDLINE_SHELL_HELPERS
    actors/context                    # the node's clock and randomness, handed to every actor
    actors/outbox                     # how actors reach actors: CAF handles
    actors/worker                     # runs a blocking stage on a detached CAF actor
    actors/warm_start                 # loads an encoder's or decoder's model on a thread of its own
    actors/inputs                     # fetches and verifies a job's input files
    actors/pool/checkpoint_store      # hashes, fsyncs and pulls a pool's checkpoint files
    actors/coordinator/dispatch_setup # reads the timing profile; logs what it cannot use
    actors/coordinator/input_maker    # cuts frames out of videos with ffmpeg
    actors/decoder/output_index)      # writes a run's index.jsonl

# Sets `out` to the machine files under `root` (paths relative to it, sorted).
function(vidline_machine_files out root)
  if(CMAKE_SCRIPT_MODE_FILE)
    file(GLOB_RECURSE _all RELATIVE ${root} ${root}/actors/*.cpp ${root}/actors/*.hpp)
  else()
    file(GLOB_RECURSE _all RELATIVE ${root} CONFIGURE_DEPENDS
         ${root}/actors/*.cpp ${root}/actors/*.hpp)
  endif()
  set(_machines)
  foreach(f IN LISTS _all)
    get_filename_component(_name ${f} NAME_WE)
    string(REGEX REPLACE "\\.[ch]pp$" "" _stem "${f}")
    if(_name MATCHES "_actor" OR f MATCHES "^actors/(planner|supervisor)/" OR
       _stem IN_LIST VIDLINE_SHELL_HELPERS)
      continue()
    endif()
    list(APPEND _machines ${f})
  endforeach()
  list(SORT _machines)
  set(${out} ${_machines} PARENT_SCOPE)
endfunction()
