# Python and pybind11, which opgen (it embeds Python to render with Jinja2)
# and every package build (its modules are pybind11 extensions) both need.
# The generator alone needs no jaxlib, torch or CUDA: OpgenToolchain.cmake
# looks for those when a package is built.
include_guard(GLOBAL)

find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module
             OPTIONAL_COMPONENTS Development.Embed)
execute_process(COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
                OUTPUT_VARIABLE pybind11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE opgen_pybind11_found)
if(NOT opgen_pybind11_found EQUAL 0)
  message(FATAL_ERROR "pybind11 is not installed for ${Python_EXECUTABLE} (pip install pybind11)")
endif()
find_package(pybind11 CONFIG REQUIRED)
