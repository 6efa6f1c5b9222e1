# assets.cmake — files compiled into libember, generated at build time.
#
#   src/server/webui/index.html -> webui_index_html[] / webui_index_html_len
#                                  (declared in src/server/webui.h)
#
# Also tells src/io/demo_model.c where the source tree's demo model is, the
# last place em_demo_model_dir() looks.
set(EMBER_ASSET_SOURCES "")
set(EMBER_ASSET_DIR ${CMAKE_BINARY_DIR}/assets)
file(MAKE_DIRECTORY ${EMBER_ASSET_DIR})

# ember_embed(<input file> <C symbol> [<header to include>])
function(ember_embed input symbol)
  set(out ${EMBER_ASSET_DIR}/${symbol}.c)
  set(header_arg "")
  if(ARGC GREATER 2)
    set(header_arg -DHEADER=${ARGV2})
  endif()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${out} -DNAME=${symbol} ${header_arg}
            -P ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    DEPENDS ${input} ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "Embedding ${input}"
    VERBATIM)
  set(EMBER_ASSET_SOURCES ${EMBER_ASSET_SOURCES} ${out} PARENT_SCOPE)
endfunction()

ember_embed(${CMAKE_SOURCE_DIR}/src/server/webui/index.html webui_index_html server/webui.h)

set_source_files_properties(${CMAKE_SOURCE_DIR}/src/io/demo_model.c PROPERTIES
  COMPILE_DEFINITIONS "EMBER_DEMO_MODEL_SRC_DIR=\"${CMAKE_SOURCE_DIR}/models/demo\"")
