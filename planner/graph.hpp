// The one place Boost.Graph is used: a DAG of task ids and the passes over it.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

namespace mk::planner {

using Dag = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

// A topological order of the vertices, or nullopt when the graph has a cycle.
std::optional<std::vector<uint32_t>> topological_order(const Dag&);
// The vertices of one cycle, in edge order (empty when the graph is acyclic).
std::vector<uint32_t> find_cycle(const Dag&);

}  // namespace mk::planner
