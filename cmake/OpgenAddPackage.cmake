# opgen_add_package: specs and kernel bodies in, an importable Python package
# out (the XLA handlers' module _C, the PyTorch kernels, the JAX and torch
# bindings), the way pybind11_add_module turns sources into a module.
#
#   opgen_add_package(
#     SPECS <dir>              # <op>.yaml files and package.yaml
#     KERNELS <dir>            # <op>.cu (platform cuda) and <op>.cc (platform cpu)
#     [GENERATED <dir>]        # opgen's output (default: <build>/opgen_generated)
#     [REGENERATE ON|OFF]      # refresh GENERATED during the build (default ON)
#     [GENERATE_TARGET <name>] # the refresh step's target (default: <package>_generate)
#     [OUTPUT <dir>]           # where the package is staged (default: <build>/python)
#     [INSTALL_DESTINATION <dir>] [INSTALL_COMPONENT <name>])
#
# Needs OpgenToolchain.cmake, OPGEN_RUNTIME_DIR, OPGEN_TEMPLATES_DIR, OPGEN_RENDER_DIR and
# OPGEN_COMMAND (the opgen target to run at build time); OPGEN_EXECUTABLE_FILE,
# where set (an installed opgen), also runs at configure time. Sets, in the
# caller's scope, OPGEN_PACKAGE_NAME and OPGEN_PACKAGE_OPS.
include_guard(GLOBAL)

function(opgen_add_package)
  cmake_parse_arguments(PARSE_ARGV 0 ARG ""
    "SPECS;KERNELS;GENERATED;REGENERATE;GENERATE_TARGET;OUTPUT;INSTALL_DESTINATION;INSTALL_COMPONENT" "")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "opgen_add_package: unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  foreach(required SPECS KERNELS)
    if(NOT ARG_${required})
      message(FATAL_ERROR "opgen_add_package: ${required} <dir> is required")
    endif()
  endforeach()
  get_filename_component(specs_dir "${ARG_SPECS}" ABSOLUTE)
  get_filename_component(kernels_dir "${ARG_KERNELS}" ABSOLUTE)
  if(NOT ARG_GENERATED)
    set(ARG_GENERATED "${CMAKE_CURRENT_BINARY_DIR}/opgen_generated")
  endif()
  get_filename_component(generated "${ARG_GENERATED}" ABSOLUTE)
  if(NOT DEFINED ARG_REGENERATE)
    set(ARG_REGENERATE ON)
  endif()
  if(NOT ARG_OUTPUT)
    set(ARG_OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/python")
  endif()
  if(NOT DEFINED ARG_INSTALL_DESTINATION)
    set(ARG_INSTALL_DESTINATION ".")
  endif()
  if(NOT ARG_INSTALL_COMPONENT)
    set(ARG_INSTALL_COMPONENT python)
  endif()

  file(GLOB specs CONFIGURE_DEPENDS "${specs_dir}/*.yaml")
  list(SORT specs)
  if(NOT specs)
    message(FATAL_ERROR "opgen_add_package: no *.yaml specs in ${specs_dir}")
  endif()
  _opgen_read_package("${specs}" "${specs_dir}" "${generated}" ${ARG_REGENERATE})
  set(pkg "${OPGEN_PACKAGE_NAME}")
  if(NOT ARG_GENERATE_TARGET)
    set(ARG_GENERATE_TARGET "${pkg}_generate")
  endif()
  # Every file opgen writes, by what the build does with it (opgen_package.cmake;
  # generator/model/outputs.cc says what each kind is).
  set(outputs "")
  foreach(kind IN LISTS OPGEN_FILE_KINDS)
    set(${kind}_files ${OPGEN_FILES_${kind}})
    list(TRANSFORM ${kind}_files PREPEND "${generated}/")
    list(APPEND outputs ${${kind}_files})
  endforeach()
  if(ARG_REGENERATE)
    _opgen_regenerate_rule(${ARG_GENERATE_TARGET} "${pkg}" "${specs}" "${specs_dir}" "${generated}" ${outputs})
  endif()

  _opgen_check_bodies("${kernels_dir}" "${specs_dir}")
  set(kernel_sources ${BODY_CPU_files})
  if(OPGEN_WITH_CUDA)
    list(APPEND kernel_sources ${BODY_CUDA_files})
  endif()
  _opgen_kernels_library(${pkg}_kernels "${generated}" "${kernels_dir}" ${kernel_sources})
  if(ARG_REGENERATE)
    add_dependencies(${pkg}_kernels ${ARG_GENERATE_TARGET})
  endif()

  set(stage "${ARG_OUTPUT}/${pkg}")
  _opgen_xla_module(${pkg}_C "${pkg}" "${stage}" ${XLA_files})
  set(package_targets ${pkg}_C)
  if(OPGEN_WITH_TORCH)
    _opgen_torch_library(${pkg}_torch_ops "${pkg}" "${stage}" ${TORCH_files})
    list(APPEND package_targets ${pkg}_torch_ops)
  endif()
  _opgen_stage_and_install("${pkg}" "${ARG_OUTPUT}" "${generated}/python/${pkg}" "${ARG_INSTALL_DESTINATION}"
    ${ARG_INSTALL_COMPONENT} "${package_targets}" ${PYTHON_files})

  set(OPGEN_PACKAGE_NAME "${pkg}" PARENT_SCOPE)
  set(OPGEN_PACKAGE_OPS "${OPGEN_PACKAGE_OPS}" PARENT_SCOPE)
endfunction()

# CMake needs the package name and op list at configure time: an installed
# opgen writes them now (and again whenever a spec is added or removed,
# which reconfigures); opgen's own build reads its committed generated/.
# Includes <generated>/opgen_package.cmake into the caller's scope (a macro:
# its OPGEN_* lists are the caller's).
macro(_opgen_read_package specs specs_dir generated regenerate)
  if(${regenerate} AND OPGEN_EXECUTABLE_FILE)
    execute_process(
      COMMAND "${OPGEN_EXECUTABLE_FILE}" generate ${specs} -o "${generated}" --templates "${OPGEN_TEMPLATES_DIR}"
              --root "${CMAKE_CURRENT_SOURCE_DIR}" --quiet
      RESULT_VARIABLE _opgen_generate_result)
    if(NOT _opgen_generate_result EQUAL 0)
      message(FATAL_ERROR "opgen_add_package: opgen could not generate from ${specs_dir} (errors above)")
    endif()
  endif()
  if(NOT EXISTS "${generated}/opgen_package.cmake")
    message(FATAL_ERROR "opgen_add_package: ${generated}/opgen_package.cmake is missing; run opgen generate")
  endif()
  include("${generated}/opgen_package.cmake")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${generated}/opgen_package.cmake")
endmacro()

# The build step that refreshes <generated> (target `target`) when a spec, a
# template or the renderer's Python changes. opgen writes only files whose
# bytes change (Ninja restats the byproducts, ARGN), so editing one spec
# recompiles only that op.
function(_opgen_regenerate_rule target pkg specs specs_dir generated)
  file(GLOB templates CONFIGURE_DEPENDS "${OPGEN_TEMPLATES_DIR}/*.j2" "${OPGEN_TEMPLATES_DIR}/*/*.j2"
       "${OPGEN_RENDER_DIR}/opgen_render/*.py")
  set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${pkg}_opgen.stamp")
  add_custom_command(
    OUTPUT "${stamp}"
    BYPRODUCTS ${ARGN}
    COMMAND "${OPGEN_COMMAND}" generate ${specs} -o "${generated}" --templates "${OPGEN_TEMPLATES_DIR}"
            --root "${CMAKE_CURRENT_SOURCE_DIR}"
    COMMAND "${CMAKE_COMMAND}" -E touch "${stamp}"
    DEPENDS ${OPGEN_COMMAND} ${specs} ${templates}
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    COMMENT "opgen: generating ${pkg} from ${specs_dir}"
    VERBATIM)
  add_custom_target(${target} DEPENDS "${stamp}")
endfunction()

# Each op's body for each platform its spec lists is in `kernels_dir`, and
# every body there belongs to an op. Adding or removing a body reconfigures,
# so a missing one is reported here.
function(_opgen_check_bodies kernels_dir specs_dir)
  file(GLOB kernel_files CONFIGURE_DEPENDS "${kernels_dir}/*.cc" "${kernels_dir}/*.cu")
  foreach(op IN LISTS OPGEN_PACKAGE_OPS)
    foreach(platform IN LISTS OPGEN_OP_${op}_PLATFORMS)
      if(platform STREQUAL "cuda")
        set(body "${kernels_dir}/${op}.cu")
      else()
        set(body "${kernels_dir}/${op}.cc")
      endif()
      if(NOT EXISTS "${body}" AND (platform STREQUAL "cpu" OR OPGEN_WITH_CUDA))
        message(FATAL_ERROR "${body} is missing: the spec of ${op} lists platform ${platform}, "
                            "whose kernel body it holds (restore it, or remove the platform; for a new op, "
                            "opgen new writes the spec and both bodies)")
      endif()
    endforeach()
  endforeach()
  # A body whose op has no spec would be left out without a word. The specs
  # themselves say which ops there are: the op list read above may be that of
  # the committed generated/ (opgen's own build), which lacks an op added
  # since, until the build regenerates it.
  foreach(file IN LISTS kernel_files)
    get_filename_component(op "${file}" NAME_WE)
    if(op STREQUAL "package" OR NOT EXISTS "${specs_dir}/${op}.yaml")
      message(WARNING "${file} is the body of no op: ${specs_dir} has no ${op}.yaml; it is not built")
    endif()
  endforeach()
endfunction()

# The hand-written bodies, compiled once for every binding that calls them,
# each through its generated wrapper (ARGN), which includes it and
# instantiates it for every dtype combination of the spec.
function(_opgen_kernels_library target generated kernels_dir)
  add_library(${target} STATIC ${ARGN})
  target_include_directories(${target} PUBLIC "${generated}/include" PRIVATE "${kernels_dir}")
  target_link_libraries(${target} PUBLIC opgen_runtime)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(OPGEN_WITH_CUDA)
    target_compile_definitions(${target} PUBLIC OPGEN_WITH_CUDA=1)
    target_link_libraries(${target} PUBLIC CUDA::cudart_static)
  endif()
endfunction()

# <package>._C: the XLA handlers and their capsules, and the eager PyTorch
# route (no framework linked in): each op's handlers (ARGN) register themselves
# with the runtime's module.
function(_opgen_xla_module target pkg stage)
  pybind11_add_module(${target} MODULE ${ARGN} "${OPGEN_RUNTIME_DIR}/src/xla_module.cc"
                      "${OPGEN_RUNTIME_DIR}/src/torch_eager.cc")
  target_compile_definitions(${target} PRIVATE OPGEN_PACKAGE_NAME="${pkg}")
  if(OPGEN_WITH_TORCH_EAGER)
    # Only ATen/dlpack.h of torch's headers: _C links no torch library.
    target_compile_definitions(${target} PRIVATE OPGEN_TORCH_EAGER=1)
    target_include_directories(${target} SYSTEM PRIVATE "${OPGEN_TORCH_INCLUDE_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES OUTPUT_NAME _C LIBRARY_OUTPUT_DIRECTORY "${stage}")
  target_include_directories(${target} SYSTEM PRIVATE "${OPGEN_XLA_FFI_INCLUDE_DIR}")
  target_link_libraries(${target} PRIVATE ${pkg}_kernels)
endfunction()

# <package>/_torch_ops.so: the PyTorch kernels, a plain shared library that
# torch.ops.load_library loads; it uses only torch's stable C shim. One file
# per op (ARGN), and the runtime's boxed kernel and tensor views.
function(_opgen_torch_library target pkg stage)
  add_library(${target} SHARED ${ARGN} "${OPGEN_RUNTIME_DIR}/src/torch_stable.cc")
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME _torch_ops PREFIX ""
    CXX_VISIBILITY_PRESET hidden BUILD_RPATH "${OPGEN_TORCH_LIB_DIR}"
    LIBRARY_OUTPUT_DIRECTORY "${stage}")
  target_include_directories(${target} SYSTEM PRIVATE "${OPGEN_TORCH_INCLUDE_DIR}")
  target_link_libraries(${target} PRIVATE ${pkg}_kernels)
  # It links everything it calls, so an undefined symbol (a missing kernel
  # instantiation) fails the link instead of torch.ops.load_library.
  target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  find_library(opgen_torch_cpu torch_cpu PATHS "${OPGEN_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
  target_link_libraries(${target} PRIVATE "${opgen_torch_cpu}")
  if(OPGEN_WITH_CUDA)
    find_library(opgen_torch_cuda torch_cuda PATHS "${OPGEN_TORCH_LIB_DIR}" NO_DEFAULT_PATH)
    if(NOT opgen_torch_cuda)
      message(FATAL_ERROR "torch in ${OPGEN_TORCH_LIB_DIR} has no CUDA; build with -DOPGEN_CUDA=OFF "
                          "or install a CUDA build of torch")
    endif()
    target_compile_definitions(${target} PRIVATE USE_CUDA=1)
    target_link_libraries(${target} PRIVATE "${opgen_torch_cuda}")
  endif()
endfunction()

# The package: the extensions (`targets`), the generated Python (ARGN, with
# its folders under `python_dir` kept) and the runtime's Python, staged in
# `output` on every build (only what changed is copied) so that
# PYTHONPATH=<output> imports it without installing; and the same installed
# under `install_destination`.
function(_opgen_stage_and_install pkg output python_dir install_destination install_component targets)
  set(stage "${output}/${pkg}")
  cmake_path(APPEND install_destination "${pkg}" OUTPUT_VARIABLE destination_root)
  cmake_path(NORMAL_PATH destination_root)
  file(GLOB runtime_python CONFIGURE_DEPENDS "${OPGEN_RUNTIME_DIR}/python/*.py"
       "${OPGEN_RUNTIME_DIR}/python/*.pyi" "${OPGEN_RUNTIME_DIR}/python/py.typed")
  set(stage_script "${CMAKE_CURRENT_BINARY_DIR}/${pkg}_stage.cmake")
  set(copies "")
  foreach(file IN LISTS ARGN runtime_python)
    if(file IN_LIST runtime_python)
      get_filename_component(relative "${file}" NAME)
    else()
      file(RELATIVE_PATH relative "${python_dir}" "${file}")
    endif()
    get_filename_component(relative_dir "${relative}" DIRECTORY)
    cmake_path(APPEND install_destination "${pkg}" "${relative_dir}" OUTPUT_VARIABLE destination)
    cmake_path(NORMAL_PATH destination)
    string(APPEND copies "file(MAKE_DIRECTORY \"${stage}/${relative_dir}\")\n"
           "file(COPY_FILE \"${file}\" \"${stage}/${relative}\" ONLY_IF_DIFFERENT)\n")
    install(FILES "${file}" DESTINATION "${destination}" COMPONENT ${install_component})
  endforeach()
  # <package>/_build.json: what the package was compiled against, for the tools that
  # describe a built package (`python -m opgen.hub` names its Kernel Hub build variant
  # from it): "torch", the major.minor of the torch whose stable-ABI headers compiled
  # _torch_ops.so (null: built without the PyTorch kernels); "cuda", nvcc's major.minor,
  # and "cuda_architectures", CMAKE_CUDA_ARCHITECTURES (null: no CUDA kernels).
  set(build_facts "${CMAKE_CURRENT_BINARY_DIR}/${pkg}_build.json")
  set(torch_fact null)
  if(OPGEN_WITH_TORCH)
    set(torch_fact "\"${OPGEN_TORCH_VERSION}\"")
  endif()
  set(cuda_fact null)
  set(archs_fact null)
  if(OPGEN_WITH_CUDA)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" cuda_version "${CMAKE_CUDA_COMPILER_VERSION}")
    set(cuda_fact "\"${cuda_version}\"")
    list(JOIN CMAKE_CUDA_ARCHITECTURES "\", \"" archs)
    set(archs_fact "[\"${archs}\"]")
  endif()
  file(CONFIGURE OUTPUT "${build_facts}" CONTENT
       "{\"torch\": ${torch_fact}, \"cuda\": ${cuda_fact}, \"cuda_architectures\": ${archs_fact}}\n")
  string(APPEND copies "file(COPY_FILE \"${build_facts}\" \"${stage}/_build.json\" ONLY_IF_DIFFERENT)\n")
  install(FILES "${build_facts}" DESTINATION "${destination_root}" RENAME _build.json
          COMPONENT ${install_component})
  file(CONFIGURE OUTPUT "${stage_script}" CONTENT "${copies}" @ONLY)
  # Importing _C right after the build turns a missing kernel instantiation
  # (an undefined symbol, which a Python module may legally have until it is
  # loaded) into a build error.
  add_custom_target(${pkg}_stage_python ALL
    COMMAND "${CMAKE_COMMAND}" -P "${stage_script}"
    COMMAND "${Python_EXECUTABLE}" -c "import sys; sys.path.insert(0, sys.argv[1]); import ${pkg}._C"
            "${output}"
    DEPENDS ${targets}
    COMMENT "opgen: staging the ${pkg} package in ${output} and importing ${pkg}._C"
    VERBATIM)
  install(TARGETS ${targets} LIBRARY DESTINATION "${destination_root}" COMPONENT ${install_component})
endfunction()
