-- name: critical_path_waits
-- description: The CUDA event waits a trace recorded (Stream Wait Event and Event Sync sync events): what waited for the work recorded on which stream.
-- grain: one row per run × rank × Stream Wait Event or Event Sync with a known wait (GPU traces)
-- param: run VARCHAR a run_id, or NULL for every run
-- A cudaStreamWaitEvent(S, e) makes the work launched on stream S after it
-- wait for the work launched on the stream e was recorded on before the
-- cudaEventRecord(e); a cudaEventSynchronize(e) makes the host wait for that
-- work.  Kineto writes each (torch.profiler's enable_cuda_sync_events) as a
-- `cuda_sync` event, 'Stream Wait Event' on stream S or 'Event Sync', whose
-- correlation is the runtime call's, with args wait_on_stream
-- (device_events.wait_stream) and wait_on_cuda_event_record_corr_id
-- (wait_event_corr); -1 there means CUPTI did not say, and such a wait is
-- left out.  name: 'Stream Wait Event' or 'Event Sync'; stream: the waiting
-- stream (NULL or -1 for an Event Sync); correlation: the runtime call's.
-- Units: none (stream numbers and correlation ids as the trace writes them).
SELECT d.trace_id, d.run_id, d.rank, d.event_id, d.name, d.stream, d.correlation, d.wait_stream, d.wait_event_corr
FROM device_events d JOIN traces t USING (trace_id)
WHERE (run IS NULL OR d.run_id = run) AND t.trace_mode = 'gpu' AND d.correlation IS NOT NULL
  AND d.wait_stream >= 0 AND d.wait_event_corr >= 0
  AND (d.name = 'Stream Wait Event' AND d.stream IS NOT NULL OR d.name = 'Event Sync')
