#include "actors/run/chains.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace actorflow {

namespace {

// A long chain is cut into at most one segment per worker, each at least
// this long: a hand-over to another worker costs a wake-up (about 50 us
// here), which a segment must win back.
constexpr size_t min_links_per_segment = 128;

// Steps a node of a segmented chain handles per turn. Handling all that wait
// would move the steps in flight down the chain as one wave, which keeps one
// segment, and so one worker, busy at a time; waves of a few steps follow one
// another down the segments. 3 to 6 measured alike on the pipelined chain.
constexpr size_t segmented_batch_limit = 4;

// Marks the chain links among the edges (sorted by producer): an edge that
// is its producer's only one and its consumer's only input runs its consumer
// next on the producer's worker. Returns producer -> its link to another node.
std::unordered_map<int, size_t> mark_chain_links(
    const std::vector<plan_edge>& edges, const std::vector<std::shared_ptr<node_plan>>& plans,
    size_t coordinator_slots, std::vector<placement>& place) {
  std::unordered_map<int, size_t> link_from;
  for (size_t e = 0, end = 0; e < edges.size(); e = end) {
    end = e;
    while (end < edges.size() && edges[end].from.node == edges[e].from.node) ++end;
    int to = edges[e].to_node;
    size_t slots = to < 0 ? coordinator_slots : plans[static_cast<size_t>(to)]->num_slots();
    if (end - e != 1 || slots != 1) continue;
    place[e] = placement::same_worker;
    if (to >= 0) link_from[edges[e].from.node] = e;  // the coordinator ends a chain
  }
  return link_from;
}

// A cond stays on the worker that runs its switch: of a switch's outputs
// only one is live in a step, and the other's dead values cost a message per
// node, so handing either branch to another worker would buy a wake-up for
// nothing; a merge fires once per step on its first live input. So an edge
// out of a switch to a one-input node, and an edge into a merge, run their
// consumer next on the producer's worker, as a chain link does. So do the
// edges inside a loop: its iterations mostly follow one another, and a hop
// to another worker per node would cost a wake-up each (an idle worker
// still steals from the queue when iterations overlap).
void mark_cond_links(const std::vector<plan_edge>& edges,
                     const std::vector<std::shared_ptr<node_plan>>& plans,
                     std::vector<placement>& place) {
  for (size_t e = 0; e < edges.size(); ++e) {
    int to = edges[e].to_node;
    if (to < 0 || place[e] != placement::scheduler) continue;
    auto& consumer = *plans[static_cast<size_t>(to)];
    auto& producer = *plans[static_cast<size_t>(edges[e].from.node)];
    if (consumer.kind == node_kind::merge_values ||
        (producer.kind == node_kind::switch_value && consumer.num_slots() == 1) ||
        (producer.in_loop && consumer.in_loop))
      place[e] = placement::same_worker;
  }
}

// The remaining edges into a node of several inputs (the coordinator too,
// with several fetches and targets) run it on the producer's worker after
// what that worker has queued, waking no other (see deliver in
// node_output.cpp). Its inputs often start on one worker: the coordinator
// sends a step's feeds from its own, so two fed inputs that meet in a node
// are queued there, and the node runs once, after both. Through the
// scheduler, the first input handed the node to the other worker, waking
// it, so both workers took part in every step of a cond and napped at its
// end; the next step's start, given to a napping worker, waited out the nap
// (CAF's naps cannot be cut short): a cond of 10 scalar adds cost 140 us a
// step instead of 10 in some runs.
void mark_gathering_links(const std::vector<plan_edge>& edges,
                          const std::vector<std::shared_ptr<node_plan>>& plans,
                          size_t coordinator_slots, std::vector<placement>& place) {
  for (size_t e = 0; e < edges.size(); ++e) {
    if (place[e] != placement::scheduler) continue;
    int to = edges[e].to_node;
    size_t slots = to < 0 ? coordinator_slots : plans[static_cast<size_t>(to)]->num_slots();
    if (slots > 1) place[e] = placement::after_queued;
  }
}

}  // namespace

std::vector<placement> place_chains(const std::vector<plan_edge>& edges,
                                    const std::vector<std::shared_ptr<node_plan>>& plans,
                                    size_t coordinator_slots, size_t workers) {
  std::vector<placement> place(edges.size(), placement::scheduler);
  auto link_from = mark_chain_links(edges, plans, coordinator_slots, place);
  mark_cond_links(edges, plans, place);
  mark_gathering_links(edges, plans, coordinator_slots, place);
  std::unordered_set<int> linked_to;
  for (auto [from, e] : link_from) linked_to.insert(edges[e].to_node);
  for (auto [head, unused] : link_from) {
    if (linked_to.count(head)) continue;  // not the first node of its chain
    std::vector<size_t> chain;
    for (auto it = link_from.find(head); it != link_from.end();
         it = link_from.find(edges[it->second].to_node))
      chain.push_back(it->second);
    size_t segments = std::min(workers, chain.size() / min_links_per_segment);
    if (segments < 2) continue;
    plans[static_cast<size_t>(head)]->batch_limit = segmented_batch_limit;
    for (size_t e : chain) {
      place[e] = placement::pinned;
      plans[static_cast<size_t>(edges[e].to_node)]->batch_limit = segmented_batch_limit;
    }
    for (size_t j = 1; j < segments; ++j)
      place[chain[chain.size() * j / segments]] = placement::next_segment;
  }
  return place;
}

}  // namespace actorflow
