-- scaletrace database schema (docs/schema.md describes every column).
-- Times are BIGINT nanoseconds; every table carries run_id and rank so that
-- the file is queryable with the plain duckdb CLI without joins.

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

CREATE TABLE IF NOT EXISTS runs (
    run_id            VARCHAR PRIMARY KEY,
    source_dir        VARCHAR,
    workload          VARCHAR,
    scaling           VARCHAR,
    world_size        INTEGER,
    num_nodes         INTEGER,
    gpus_per_node     INTEGER,
    dp                INTEGER,
    tp                INTEGER,
    pp                INTEGER,
    cp                INTEGER,
    global_batch_size BIGINT,
    seq_len           BIGINT,
    tokens_per_step   BIGINT,
    model_name        VARCHAR,
    num_params        DOUBLE,
    num_layers        INTEGER,
    hidden_size       INTEGER,
    flops_per_token   DOUBLE,
    device_name       VARCHAR,
    peak_flops        DOUBLE,
    peak_flops_source VARCHAR,
    manifest          JSON,
    updated_at        TIMESTAMP
);
-- added after schema version 1 was released: older files gain the column on their next ingest
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cpu_cores INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS dtype VARCHAR;

CREATE SEQUENCE IF NOT EXISTS trace_id_seq;

CREATE TABLE IF NOT EXISTS traces (
    trace_id      BIGINT PRIMARY KEY,
    path          VARCHAR UNIQUE,
    run_id        VARCHAR,
    rank          INTEGER,
    rank_source   VARCHAR,
    sha256        VARCHAR,
    bytes         BIGINT,
    json_bytes    BIGINT,
    num_events    BIGINT,
    host          VARCHAR,
    pid           BIGINT,
    device_name   VARCHAR,
    world_size    INTEGER,
    backend       VARCHAR,
    nccl_version  VARCHAR,
    base_time_ns  BIGINT,
    ts_fractional BOOLEAN,
    trace_mode    VARCHAR,
    status        VARCHAR,
    ingested_at   TIMESTAMP
);

-- added with the launching op and kernel families: rows made by an older extract are parsed again
ALTER TABLE traces ADD COLUMN IF NOT EXISTS extract_version VARCHAR;

CREATE TABLE IF NOT EXISTS device_events (
    trace_id    BIGINT,
    run_id      VARCHAR,
    rank        INTEGER,
    event_id    BIGINT,
    lane        VARCHAR,
    stream      BIGINT,
    device      BIGINT,
    cat         VARCHAR,
    name        VARCHAR,
    kind        VARCHAR,
    ts_ns       BIGINT,
    dur_ns      BIGINT,
    correlation BIGINT,
    step        BIGINT
);

-- added with kernel_summary (pipeline/launchers.py, pipeline/families.py): the op that launched the
-- event, the compute family it gives (or the kernel's base name gives) and the base name
ALTER TABLE device_events ADD COLUMN IF NOT EXISTS launch_op VARCHAR;
ALTER TABLE device_events ADD COLUMN IF NOT EXISTS family VARCHAR;
ALTER TABLE device_events ADD COLUMN IF NOT EXISTS family_basis VARCHAR;
ALTER TABLE device_events ADD COLUMN IF NOT EXISTS short_name VARCHAR;

CREATE TABLE IF NOT EXISTS interval_unions (
    trace_id  BIGINT,
    run_id    VARCHAR,
    rank      INTEGER,
    step      BIGINT,
    set_name  VARCHAR,
    union_ns  BIGINT,
    first_ns  BIGINT,
    last_ns   BIGINT
);

CREATE TABLE IF NOT EXISTS compute_islands (
    trace_id  BIGINT,
    run_id    VARCHAR,
    rank      INTEGER,
    start_ns  BIGINT,
    end_ns    BIGINT
);

CREATE TABLE IF NOT EXISTS cpu_events (
    trace_id    BIGINT,
    run_id      VARCHAR,
    rank        INTEGER,
    event_id    BIGINT,
    cat         VARCHAR,
    name        VARCHAR,
    tid         VARCHAR,
    ts_ns       BIGINT,
    dur_ns      BIGINT,
    correlation BIGINT,
    stream      BIGINT
);
-- added with op_efficiency: the recorded shapes (Kineto `Input Dims`, `Input type`,
-- `Concrete Inputs`, JSON text) of the CPU ops FLOPs are counted for; NULL elsewhere
ALTER TABLE cpu_events ADD COLUMN IF NOT EXISTS input_dims VARCHAR;
ALTER TABLE cpu_events ADD COLUMN IF NOT EXISTS input_types VARCHAR;
ALTER TABLE cpu_events ADD COLUMN IF NOT EXISTS concrete_inputs VARCHAR;

CREATE TABLE IF NOT EXISTS steps (
    trace_id BIGINT,
    run_id   VARCHAR,
    rank     INTEGER,
    step     BIGINT,
    ts_ns    BIGINT,
    dur_ns   BIGINT
);

CREATE TABLE IF NOT EXISTS collectives (
    trace_id    BIGINT,
    run_id      VARCHAR,
    rank        INTEGER,
    event_id    BIGINT,
    collective  VARCHAR,
    pg_name     VARCHAR,
    pg_desc     VARCHAR,
    group_size  BIGINT,
    dtype       VARCHAR,
    in_nelems   BIGINT,
    out_nelems  BIGINT,
    seq         BIGINT,
    meta_source VARCHAR,
    exposed_ns  BIGINT,
    ts_ns       BIGINT,
    dur_ns      BIGINT,
    ordinal     BIGINT
);

CREATE TABLE IF NOT EXISTS side_files (
    path      VARCHAR PRIMARY KEY,
    run_id    VARCHAR,
    rank      INTEGER,
    kind      VARCHAR,
    sha256    VARCHAR,
    rows      BIGINT
);

CREATE TABLE IF NOT EXISTS step_log (
    run_id    VARCHAR,
    rank      INTEGER,
    step      BIGINT,
    start_ns  BIGINT,
    dur_ns    BIGINT,
    tokens    BIGINT,
    profiled  BOOLEAN
);

CREATE TABLE IF NOT EXISTS power_samples (
    run_id VARCHAR,
    rank   INTEGER,
    ts_ns  BIGINT,
    watts  DOUBLE
);

CREATE TABLE IF NOT EXISTS ingest_log (
    logged_at TIMESTAMP,
    path      VARCHAR,
    run_id    VARCHAR,
    status    VARCHAR,
    message   VARCHAR
);
ALTER TABLE ingest_log ADD COLUMN IF NOT EXISTS node VARCHAR;
