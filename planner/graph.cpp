#include "planner/graph.hpp"

#include <algorithm>

#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

namespace mk::planner {
namespace {

struct CycleVisitor : boost::default_dfs_visitor {
  std::vector<uint32_t>* parent;
  std::vector<uint32_t>* cycle;
  void tree_edge(Dag::edge_descriptor e, const Dag& g) { (*parent)[boost::target(e, g)] = boost::source(e, g); }
  void back_edge(Dag::edge_descriptor e, const Dag& g) {
    if (!cycle->empty()) return;
    const uint32_t from = boost::source(e, g), to = boost::target(e, g);
    for (uint32_t v = from; v != to; v = (*parent)[v]) cycle->push_back(v);
    cycle->push_back(to);
    std::reverse(cycle->begin(), cycle->end());
  }
};

}  // namespace

std::optional<std::vector<uint32_t>> topological_order(const Dag& g) {
  std::vector<Dag::vertex_descriptor> reversed;
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    return std::nullopt;
  }
  return std::vector<uint32_t>(reversed.rbegin(), reversed.rend());
}

std::vector<uint32_t> find_cycle(const Dag& g) {
  std::vector<uint32_t> parent(boost::num_vertices(g), 0), cycle;
  CycleVisitor vis;
  vis.parent = &parent;
  vis.cycle = &cycle;
  boost::depth_first_search(g, boost::visitor(vis));
  return cycle;
}

}  // namespace mk::planner
