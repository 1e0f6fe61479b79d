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
  # What a regeneration depends on besides the specs: the templates and the
  # renderer's Python.
  file(GLOB templates CONFIGURE_DEPENDS "${OPGEN_TEMPLATES_DIR}/*.j2" "${OPGEN_TEMPLATES_DIR}/*/*.j2"
       "${OPGEN_RENDER_DIR}/opgen_render/*.py")
  list(SORT specs)
  if(NOT specs)
    message(FATAL_ERROR "opgen_add_package: no *.yaml specs in ${specs_dir}")
  endif()
  # CMake needs the package name and op list at configure time: an installed
  # opgen writes them now (and again whenever a spec is added or removed,
  # which reconfigures); opgen's own build reads its committed generated/.
  if(ARG_REGENERATE AND OPGEN_EXECUTABLE_FILE)
    execute_process(
      COMMAND "${OPGEN_EXECUTABLE_FILE}" generate ${specs} -o "${generated}" --templates "${OPGEN_TEMPLATES_DIR}"
              --root "${CMAKE_CURRENT_SOURCE_DIR}" --quiet
      RESULT_VARIABLE generate_result)
    if(NOT generate_result EQUAL 0)
      message(FATAL_ERROR "opgen_add_package: opgen could not generate from ${specs_dir} (errors above)")
    endif()
  endif()
  if(NOT EXISTS "${generated}/opgen_package.cmake")
    message(FATAL_ERROR "opgen_add_package: ${generated}/opgen_package.cmake is missing; run opgen generate")
  endif()
  include("${generated}/opgen_package.cmake")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${generated}/opgen_package.cmake")
  set(pkg "${OPGEN_PACKAGE_NAME}")
  if(NOT ARG_GENERATE_TARGET)
    set(ARG_GENERATE_TARGET "${pkg}_generate")
  endif()

  # Every file opgen writes, by what the build does with it (opgen_package.cmake).
  set(python_dir "${generated}/python/${pkg}")
  foreach(kind XLA TORCH BODY_CPU BODY_CUDA PYTHON HEADER DOC BUILD)
    set(${kind}_files ${OPGEN_FILES_${kind}})
    list(TRANSFORM ${kind}_files PREPEND "${generated}/")
  endforeach()
  set(outputs ${XLA_files} ${TORCH_files} ${BODY_CPU_files} ${BODY_CUDA_files} ${PYTHON_files} ${HEADER_files}
      ${DOC_files} ${BUILD_files})

  if(ARG_REGENERATE)
    # opgen writes only files whose bytes change (Ninja restats the
    # byproducts), so editing one spec recompiles only that op.
    set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${pkg}_opgen.stamp")
    add_custom_command(
      OUTPUT "${stamp}"
      BYPRODUCTS ${outputs}
      COMMAND "${OPGEN_COMMAND}" generate ${specs} -o "${generated}" --templates "${OPGEN_TEMPLATES_DIR}"
              --root "${CMAKE_CURRENT_SOURCE_DIR}"
      COMMAND "${CMAKE_COMMAND}" -E touch "${stamp}"
      DEPENDS ${OPGEN_COMMAND} ${specs} ${templates}
      WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
      COMMENT "opgen: generating ${pkg} from ${specs_dir}"
      VERBATIM)
    add_custom_target(${ARG_GENERATE_TARGET} DEPENDS "${stamp}")
  endif()

  # The hand-written bodies, compiled once for every binding that calls them,
  # each through its generated wrapper, which includes it and instantiates it
  # for every dtype combination of the spec. Adding or removing a body
  # reconfigures, so a missing one is reported here.
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
  # A body whose op has no spec would be left out without a word.
  foreach(file IN LISTS kernel_files)
    get_filename_component(op "${file}" NAME_WE)
    if(NOT op IN_LIST OPGEN_PACKAGE_OPS)
      message(WARNING "${file} is the body of no op: ${specs_dir} has no ${op}.yaml; it is not built")
    endif()
  endforeach()
  set(kernel_sources ${BODY_CPU_files})
  if(OPGEN_WITH_CUDA)
    list(APPEND kernel_sources ${BODY_CUDA_files})
  endif()
  add_library(${pkg}_kernels STATIC ${kernel_sources})
  target_include_directories(${pkg}_kernels PUBLIC "${generated}/include" PRIVATE "${kernels_dir}")
  target_link_libraries(${pkg}_kernels PUBLIC opgen_runtime)
  set_target_properties(${pkg}_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(OPGEN_WITH_CUDA)
    target_compile_definitions(${pkg}_kernels PUBLIC OPGEN_WITH_CUDA=1)
    target_link_libraries(${pkg}_kernels PUBLIC CUDA::cudart_static)
  endif()
  if(ARG_REGENERATE)
    add_dependencies(${pkg}_kernels ${ARG_GENERATE_TARGET})
  endif()

  # <package>._C: the XLA handlers and their capsules (no framework linked in):
  # each op's handlers register themselves with the runtime's module.
  set(stage "${ARG_OUTPUT}/${pkg}")
  pybind11_add_module(${pkg}_C MODULE ${XLA_files} "${OPGEN_RUNTIME_DIR}/src/xla_module.cc")
  target_compile_definitions(${pkg}_C PRIVATE OPGEN_PACKAGE_NAME="${pkg}")
  set_target_properties(${pkg}_C PROPERTIES OUTPUT_NAME _C LIBRARY_OUTPUT_DIRECTORY "${stage}")
  target_include_directories(${pkg}_C SYSTEM PRIVATE "${OPGEN_XLA_FFI_INCLUDE_DIR}")
  target_link_libraries(${pkg}_C PRIVATE ${pkg}_kernels)
  set(package_targets ${pkg}_C)

  # <package>/_torch_ops.so: the PyTorch kernels, a plain shared library that
  # torch.ops.load_library loads; it uses only torch's stable C shim.
  if(OPGEN_WITH_TORCH)
    # One file per op, and the runtime's boxed kernel and tensor views.
    add_library(${pkg}_torch_ops SHARED ${TORCH_files} "${OPGEN_RUNTIME_DIR}/src/torch_stable.cc")
    set_target_properties(${pkg}_torch_ops PROPERTIES
      OUTPUT_NAME _torch_ops PREFIX ""
      CXX_VISIBILITY_PRESET hidden BUILD_RPATH "${OPGEN_TORCH_LIB_DIR}"
      LIBRARY_OUTPUT_DIRECTORY "${stage}")
    target_include_directories(${pkg}_torch_ops SYSTEM PRIVATE "${OPGEN_TORCH_INCLUDE_DIR}")
    target_link_libraries(${pkg}_torch_ops PRIVATE ${pkg}_kernels)
    # It links everything it calls, so an undefined symbol (a missing kernel
    # instantiation) fails the link instead of torch.ops.load_library.
    target_link_options(${pkg}_torch_ops PRIVATE "LINKER:--no-undefined")
    find_library(opgen_torch_cpu torch_cpu PATHS "${OPGEN_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
    target_link_libraries(${pkg}_torch_ops PRIVATE "${opgen_torch_cpu}")
    if(OPGEN_WITH_CUDA)
      find_library(opgen_torch_cuda torch_cuda PATHS "${OPGEN_TORCH_LIB_DIR}" NO_DEFAULT_PATH)
      if(NOT opgen_torch_cuda)
        message(FATAL_ERROR "torch in ${OPGEN_TORCH_LIB_DIR} has no CUDA; build with -DOPGEN_CUDA=OFF "
                            "or install a CUDA build of torch")
      endif()
      target_compile_definitions(${pkg}_torch_ops PRIVATE USE_CUDA=1)
      target_link_libraries(${pkg}_torch_ops PRIVATE "${opgen_torch_cuda}")
    endif()
    list(APPEND package_targets ${pkg}_torch_ops)
  endif()

  # The package: the extensions, the generated Python (with its folders under
  # python/<package>/) and the runtime's Python, staged on every build (only
  # what changed is copied) so that PYTHONPATH=<OUTPUT> imports it without
  # installing.
  file(GLOB runtime_python CONFIGURE_DEPENDS "${OPGEN_RUNTIME_DIR}/python/*.py"
       "${OPGEN_RUNTIME_DIR}/python/*.pyi" "${OPGEN_RUNTIME_DIR}/python/py.typed")
  set(stage_script "${CMAKE_CURRENT_BINARY_DIR}/${pkg}_stage.cmake")
  set(copies "")
  foreach(file IN LISTS PYTHON_files runtime_python)
    if(file IN_LIST runtime_python)
      get_filename_component(relative "${file}" NAME)
    else()
      file(RELATIVE_PATH relative "${python_dir}" "${file}")
    endif()
    get_filename_component(relative_dir "${relative}" DIRECTORY)
    cmake_path(APPEND ARG_INSTALL_DESTINATION "${pkg}" "${relative_dir}" OUTPUT_VARIABLE destination)
    cmake_path(NORMAL_PATH destination)
    string(APPEND copies "file(MAKE_DIRECTORY \"${stage}/${relative_dir}\")\n"
           "file(COPY_FILE \"${file}\" \"${stage}/${relative}\" ONLY_IF_DIFFERENT)\n")
    install(FILES "${file}" DESTINATION "${destination}" COMPONENT ${ARG_INSTALL_COMPONENT})
  endforeach()
  file(CONFIGURE OUTPUT "${stage_script}" CONTENT "${copies}" @ONLY)
  # Importing _C right after the build turns a missing kernel instantiation
  # (an undefined symbol, which a Python module may legally have until it is
  # loaded) into a build error.
  add_custom_target(${pkg}_stage_python ALL
    COMMAND "${CMAKE_COMMAND}" -P "${stage_script}"
    COMMAND "${Python_EXECUTABLE}" -c "import sys; sys.path.insert(0, sys.argv[1]); import ${pkg}._C"
            "${ARG_OUTPUT}"
    DEPENDS ${package_targets}
    COMMENT "opgen: staging the ${pkg} package in ${ARG_OUTPUT} and importing ${pkg}._C"
    VERBATIM)
  cmake_path(APPEND ARG_INSTALL_DESTINATION "${pkg}" OUTPUT_VARIABLE destination)
  cmake_path(NORMAL_PATH destination)
  install(TARGETS ${package_targets} LIBRARY DESTINATION "${destination}" COMPONENT ${ARG_INSTALL_COMPONENT})

  set(OPGEN_PACKAGE_NAME "${pkg}" PARENT_SCOPE)
  set(OPGEN_PACKAGE_OPS "${OPGEN_PACKAGE_OPS}" PARENT_SCOPE)
endfunction()
