# Python and pybind11, which every package build needs (its modules are
# pybind11 extensions); included by OpgenToolchain.cmake. opgen itself needs
# neither: it runs the environment's Python to render, as a child process.
include_guard(GLOBAL)

find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
                OUTPUT_VARIABLE pybind11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE opgen_pybind11_found)
if(NOT opgen_pybind11_found EQUAL 0)
  # The command on a line of its own, which CMake does not reflow (OpgenToolchain.cmake's jaxlib too).
  message(FATAL_ERROR "pybind11 is not installed for ${Python_EXECUTABLE}. Install it into that Python:\n"
                      "  \"${Python_EXECUTABLE}\" -m pip install pybind11")
endif()
find_package(pybind11 CONFIG REQUIRED)
