//! Running a scheduled graph: per split, wait for the producers of its
//! inputs, copy them in, compute, record an event.

use std::sync::Arc;

use super::Scheduler;
use crate::backend::Event;
use crate::error::{Error, Result};
use crate::ir::{TensorId, ViewOf};

pub(super) fn run(s: &mut Scheduler) -> Result<()> {
    let n_copies = s.config.n_copies;
    let copy = (s.stats.runs % n_copies as u64) as usize;
    let scheduled = s
        .scheduled
        .as_mut()
        .ok_or_else(|| Error::InvalidArgument("no graph to compute".into()))?;
    // pipelined transfers read this run's storage
    if n_copies > 1 {
        for split in &scheduled.splits {
            for input in &split.inputs {
                if let Some(&storage) = input.storages.get(copy) {
                    scheduled.graph.tensor_mut(input.copy).view = Some(ViewOf {
                        base: storage,
                        offset: 0,
                    });
                }
            }
        }
    }
    let graph = &scheduled.graph;
    let mut done: Vec<Option<Arc<dyn Event>>> = vec![None; scheduled.splits.len()];
    for (si, split) in scheduled.splits.iter().enumerate() {
        let _span = tracing::trace_span!("split", index = si, backend = split.backend.0).entered();
        if let Some(abort) = s.abort.as_mut()
            && abort()
        {
            return Err(Error::Aborted);
        }
        let stream = &mut s.streams[split.backend.index()];
        // the copies this run writes must not overwrite what this split
        // still reads from n_copies runs ago
        if let Some(ev) = s.events[si][copy].take() {
            stream.wait_event(ev.as_ref())?;
        }
        // the graph's own inputs first: the device takes them while the
        // splits that write the others still run (a server reads them
        // before the client waits for the split before it)
        let waits = &scheduled.waits[si];
        let order = (0..waits.len())
            .filter(|&k| waits[k].is_none())
            .chain((0..waits.len()).filter(|&k| waits[k].is_some()));
        for k in order {
            let input = &split.inputs[k];
            if let Some(p) = waits[k]
                && let Some(ev) = &done[p]
            {
                stream.wait_event(ev.as_ref())?;
            }
            let (src, src_off) = graph
                .data_of(input.source)
                .ok_or_else(|| Error::Unallocated(graph.display_name(input.source)))?;
            let (dst, dst_off) = graph
                .data_of(input.copy)
                .ok_or_else(|| Error::Unallocated(graph.display_name(input.copy)))?;
            stream.copy_async(src.as_ref(), src_off, dst.as_ref(), dst_off, input.bytes)?;
            s.stats.bytes_copied += input.bytes;
            s.stats.copies_made += 1;
        }
        let nodes: &[TensorId] = &graph.nodes()[split.nodes.clone()];
        match s.eval.as_mut() {
            None => stream.compute(graph, nodes)?,
            Some(cb) => {
                // run up to each node the callback wants, then show it
                let mut start = 0;
                for (i, &n) in nodes.iter().enumerate() {
                    if !cb.wants(graph, n) {
                        continue;
                    }
                    stream.compute(graph, &nodes[start..=i])?;
                    stream.synchronize()?;
                    start = i + 1;
                    if !cb.observe(graph, n) {
                        return Err(Error::Aborted);
                    }
                }
                stream.compute(graph, &nodes[start..])?;
            }
        }
        let ev = stream.record_event()?;
        s.events[si][copy] = Some(ev.clone());
        done[si] = Some(ev);
    }
    s.stats.runs += 1;
    Ok(())
}
