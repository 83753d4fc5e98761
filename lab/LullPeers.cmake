# Finds the event loops lull-lab and the benchmarks compare lull with, and
# sets LULL_PEER_DEFS (LAB_HAVE_* definitions) and LULL_PEER_LIBS. A peer
# that is missing is skipped at run time with a printed line, never a
# build failure. Included by lab/ and bench/.
set(LULL_PEER_DEFS "")
set(LULL_PEER_LIBS "")

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(LULL_UV QUIET IMPORTED_TARGET libuv)
  pkg_check_modules(LULL_EVENT QUIET IMPORTED_TARGET libevent_core libevent_pthreads)
endif()

if(LULL_UV_FOUND)
  list(APPEND LULL_PEER_DEFS LAB_HAVE_UV)
  list(APPEND LULL_PEER_LIBS PkgConfig::LULL_UV)
endif()
# libevent before libev: see below.
if(LULL_EVENT_FOUND)
  list(APPEND LULL_PEER_DEFS LAB_HAVE_EVENT)
  list(APPEND LULL_PEER_LIBS PkgConfig::LULL_EVENT)
endif()

# Debian's libev-dev ships no .pc file. libev.so also exports libevent's
# API names (event_add, event_base_new, ...) for its compatibility layer,
# which would interpose on the real libevent in the same program; the static
# archive keeps that layer in its own member (event.o), which the linker
# leaves out because nothing here references it. So: prefer libev.a, and
# with the shared library keep libevent first on the link line.
find_path(LULL_EV_INCLUDE_DIR ev.h PATH_SUFFIXES libev)
find_library(LULL_EV_LIBRARY NAMES libev.a ev)
if(LULL_EV_INCLUDE_DIR AND LULL_EV_LIBRARY)
  list(APPEND LULL_PEER_DEFS LAB_HAVE_EV)
  if(LULL_EV_LIBRARY MATCHES "\\.a$")
    list(APPEND LULL_PEER_DEFS LAB_EV_STATIC) # the lab says how it linked
  endif()
  if(NOT TARGET lull_peer_ev)
    add_library(lull_peer_ev INTERFACE IMPORTED)
    set_target_properties(lull_peer_ev PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${LULL_EV_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${LULL_EV_LIBRARY};m")
  endif()
  list(APPEND LULL_PEER_LIBS lull_peer_ev)
endif()
