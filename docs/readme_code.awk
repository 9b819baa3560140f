# Turns the ```c++ blocks of README.md into one C++ file, so that a test
# (//docs:readme_code_test) compiles them and runs them.
#
#   awk -v out=docs/readme_code.cc -f docs/readme_code.awk README.md > out.cc
#
# The convention for a README block:
#   - Its `#include` lines are hoisted to the top of the file (each once).
#   - A block whose first other line that is neither blank nor a `//`
#     comment starts with `class ` or `struct ` defines types: it is placed
#     as is at namespace scope, in namespace chunkzero. Later blocks may use
#     what it defines.
#   - Any other block is a function body: it becomes
#       absl::Status ReadmeBlockN(comm::ProcessGroup& group) {
#         <the block>
#         return absl::OkStatus();
#       }
#     in namespace chunkzero, so it may use CZ_RETURN_IF_ERROR and
#     CZ_ASSIGN_OR_RETURN, and `group`, the rank's process group. The test
#     runs every such block on 2 in-process ranks and expects OK from each.
# `#line` directives make the compiler name README.md lines in its errors.
# Exits 1 (and writes nothing useful) for an unterminated block or a README
# without any ```c++ block.
BEGIN {
  if (out == "") out = "readme_code.cc"
  in_block = 0
  blocks = 0       # ```c++ blocks seen.
  functions = 0    # Of those, function bodies.
  n_includes = 0
  n_body = 0       # Lines of the generated body, after the includes.
}

function emit(line) {
  body[++n_body] = line
}

# Ends the block collected in block_lines[1..n_block].
function finish_block(    i, line, scope, kind) {
  scope = "function"
  for (i = 1; i <= n_block; ++i) {
    line = block_lines[i]
    if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*\/\//) continue
    if (line ~ /^(class|struct)[ \t]/) scope = "namespace"
    break
  }
  emit("")
  if (scope == "function") {
    ++functions
    function_line[functions] = block_start
    emit("absl::Status ReadmeBlock" functions "(comm::ProcessGroup& group) {")
  }
  # The line after the fence is README line block_start + 1.
  emit("@LINE@ " (block_start + 1))
  for (i = 1; i <= n_block; ++i) emit(block_lines[i])
  emit("@RESET@")
  if (scope == "function") {
    emit("  return absl::OkStatus();")
    emit("}")
  }
}

in_block && /^```[ \t]*$/ {
  finish_block()
  in_block = 0
  next
}

in_block {
  if ($0 ~ /^#include[ \t]/) {
    if (!($0 in seen_include)) {
      seen_include[$0] = 1
      includes[++n_includes] = $0
    }
    # Keep the README's line numbers: an empty line stands for the include.
    block_lines[++n_block] = ""
  } else {
    block_lines[++n_block] = $0
  }
  next
}

/^```c[+][+][ \t]*$/ {
  in_block = 1
  ++blocks
  block_start = NR
  n_block = 0
  next
}

END {
  if (in_block) {
    print "README.md:" block_start ": the ```c++ block is not closed" > "/dev/stderr"
    exit 1
  }
  if (blocks == 0) {
    print "README.md: no ```c++ block" > "/dev/stderr"
    exit 1
  }
  line = 0
  print "// Generated from README.md by docs/readme_code.awk; do not edit."; ++line
  print "#include \"docs/readme_code.h\""; ++line
  print ""; ++line
  for (i = 1; i <= n_includes; ++i) {
    print includes[i]; ++line
  }
  print ""; ++line
  print "namespace chunkzero {"; ++line
  for (i = 1; i <= n_body; ++i) {
    if (body[i] ~ /^@LINE@ /) {
      print "#line " substr(body[i], 8) " \"README.md\""
    } else if (body[i] == "@RESET@") {
      # The directive names the line that follows it.
      print "#line " (line + 2) " \"" out "\""
    } else {
      print body[i]
    }
    ++line
  }
  print ""
  print "std::vector<ReadmeBlock> ReadmeBlocks() {"
  print "  return {"
  for (i = 1; i <= functions; ++i) {
    print "      {" function_line[i] ", &ReadmeBlock" i "},"
  }
  print "  };"
  print "}"
  print ""
  print "}  // namespace chunkzero"
}
