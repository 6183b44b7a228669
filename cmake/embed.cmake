# Turns the files named in FILES into a C table of (name, text), so that the
# fatune binary carries its templates and needs nothing at run time but
# itself. A file under BASE is named by its path relative to BASE
# ("simt/simt.lua"), any other by its file name alone.
# Run as: cmake -DOUT=... -DFILES="a;b" -DBASE=dir -P embed.cmake
string(REPLACE "|" ";" FILES "${FILES}")
set(body "/* generated from templates/ by cmake/embed.cmake; do not edit */\n")
string(APPEND body "#include <stddef.h>\n#include \"template_files.h\"\n")
set(table "")
set(i 0)
foreach(f IN LISTS FILES)
  file(RELATIVE_PATH name "${BASE}" "${f}")
  if(name MATCHES "^\\.\\./")
    get_filename_component(name "${f}" NAME)
  endif()
  file(READ "${f}" hex HEX)
  string(LENGTH "${hex}" hexlen)
  math(EXPR len "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const char f${i}[] = {${bytes}0};\n")
  string(APPEND table "  {\"${name}\", f${i}, ${len}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "const template_file template_files[] = {\n${table}  {NULL, NULL, 0}\n};\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
