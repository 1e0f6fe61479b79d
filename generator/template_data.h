// The checked model as plain Python data -- dicts, lists, str, int, float,
// bool, None -- for the templates: the facts of each op (names, dtypes,
// shapes, symbol bindings, attributes, the descriptor layout) and of the
// type tables, with no spelling of any language. The Python side
// (generator/python/opgen_render/context.py) derives the views and spellings
// the templates read.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "model.h"

namespace opgen::gen {

pybind11::dict package_facts(const Package& package);

// The dtype table, in the order whose index is a dtype's code in descriptors.
pybind11::list dtype_facts();

// The attribute types by name.
pybind11::dict attr_type_facts();

pybind11::dict op_facts(const Op& op, const std::string& package);

}  // namespace opgen::gen
