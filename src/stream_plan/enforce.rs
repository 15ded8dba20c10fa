//! The one pass that puts every exchange. Modelled on DataFusion's pass of that name, it walks
//! a stream plan once and inserts an exchange node wherever an input's rows are not where its
//! consumer requires them; no other code decides where rows move. An exchange is a node of its
//! own (`Spec::Exchange`): in one process it routes rows between shards by the vnode of their
//! key; it is where an exchange between processes plugs in.
//!
//! Called by `stream_plan::build` between planning and instantiation.

use super::plan::{PlanNode, Properties, StreamPlan};
use super::spec::Spec;

/// Inserts an exchange under every input whose rows are not where its node requires them.
pub fn enforce_distribution(plan: &mut StreamPlan) {
    for node in 0..plan.nodes.len() {
        for slot in 0..plan.nodes[node].inputs.len() {
            let required = plan.nodes[node].spec.requirement(slot);
            let child = plan.nodes[node].inputs[slot];
            if required.satisfied_by(&plan.nodes[child].out.distribution) {
                continue;
            }
            let out = Properties { distribution: required.distribution(), ..plan.nodes[child].out.clone() };
            plan.nodes.push(PlanNode { spec: Spec::Exchange(required), inputs: vec![child], out });
            let exchange = plan.nodes.len() - 1;
            plan.nodes[node].inputs[slot] = exchange;
        }
    }
}
