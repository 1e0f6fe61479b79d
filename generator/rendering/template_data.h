// The checked model as plain JSON data -- objects, arrays, strings, integers,
// floating numbers, booleans, null -- for the templates: the facts of each op
// (names, dtypes, shapes, symbol bindings, attributes, the descriptor layout)
// and of the type tables. Of spellings it carries only the names those tables
// give each type (the dtype table is the runtime's too: opgen/dtype_table.h);
// the renderer (generator/python/opgen_render/context.py) derives the views,
// and spelling.py spells everything else. Objects keep their keys in the
// order written here.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/model.h"

namespace opgen::gen {

using json = nlohmann::ordered_json;

json package_facts(const Package& package);

// The dtype table, in the order whose index is a dtype's code in descriptors.
json dtype_facts();

// The attribute types by name.
json attr_type_facts();

json op_facts(const Op& op, const std::string& package);

}  // namespace opgen::gen
