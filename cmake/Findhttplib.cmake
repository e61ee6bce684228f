# Debian's libcpp-httplib-dev ships a compiled libcpp-httplib.so and a .pc file but no CMake
# package: find it here. Defines httplib::httplib with the compile definitions the library
# was built with (they change class layouts, so they must match: read from pkg-config).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_HTTPLIB QUIET cpp-httplib)
endif()
find_path(HTTPLIB_INCLUDE_DIR httplib.h HINTS ${PC_HTTPLIB_INCLUDE_DIRS})
find_library(HTTPLIB_LIBRARY cpp-httplib HINTS ${PC_HTTPLIB_LIBRARY_DIRS})
if(HTTPLIB_INCLUDE_DIR)
  file(STRINGS "${HTTPLIB_INCLUDE_DIR}/httplib.h" _hl_ver REGEX "^#define CPPHTTPLIB_VERSION \"[0-9.]+\"")
  string(REGEX REPLACE "^#define CPPHTTPLIB_VERSION \"([0-9.]+)\".*" "\\1" HTTPLIB_VERSION "${_hl_ver}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(httplib REQUIRED_VARS HTTPLIB_INCLUDE_DIR HTTPLIB_LIBRARY
                                  VERSION_VAR HTTPLIB_VERSION)
if(httplib_FOUND AND NOT TARGET httplib::httplib)
  set(_hl_defs)
  foreach(f ${PC_HTTPLIB_CFLAGS_OTHER})
    if(f MATCHES "^-D(.+)$")
      list(APPEND _hl_defs "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT PC_HTTPLIB_FOUND)
    # Debian's build (0.11.4+ds): without pkg-config, assume its flags.
    set(_hl_defs CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
  endif()
  add_library(httplib::httplib UNKNOWN IMPORTED)
  set_target_properties(httplib::httplib PROPERTIES IMPORTED_LOCATION "${HTTPLIB_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${HTTPLIB_INCLUDE_DIR}"
                        INTERFACE_COMPILE_DEFINITIONS "${_hl_defs}")
endif()
