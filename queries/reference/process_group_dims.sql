-- name: process_group_dims
-- description: Process-group descriptions that name a parallel dimension (PyTorch, DeviceMesh / torchtitan, Megatron-LM): which degree the group's size is.
-- grain: one row per process-group description (collectives.pg_desc, matched exactly)
-- measures: what the size of such a group is.  run_facts reads the parallel degrees from
-- the rows measuring 'dp', 'tp', 'pp', 'cp' or 'world'; the other rows (products of
-- degrees, expert and embedding groups) are known names, so that a trace whose every group
-- is known may take a degree with no group of its own as 1 (torchtitan and DeviceMesh
-- create no group for a degree of 1).  A description no row names (`undefined`, the
-- default for torch.distributed.new_group; DeviceMesh's `mesh_dim_0` without dimension
-- names) leaves the degrees it might be unknown.  Names are matched whole, never as
-- substrings: Megatron's TENSOR_AND_DATA_PARALLEL_GROUP contains DATA_PARALLEL.
-- Sources: torch/distributed/distributed_c10d.py (`default_pg`); torch/distributed/
-- device_mesh.py (`group_desc = f"mesh_{dim_name}"`, `mesh_default`; a dimension spanning
-- the world reuses the default group); torchtitan/distributed/parallel_dims.py (dimension
-- names pp, dp_replicate, dp_shard, dp_shard_cp, dp_cp, dp, cp, tp, ep, dp_shard_in_ep,
-- dp_shard_mod_ep, and in 2025 versions fsdp, batch, loss, efsdp, etp);
-- megatron/core/parallel_state.py (`group_desc='TENSOR_MODEL_PARALLEL_GROUP'`, ...).
-- Units: none (names).
SELECT * FROM (VALUES
    -- pg_desc                                        measures        source
    ('default_pg',                                    'world',        'torch.distributed default group'),
    ('mesh_default',                                  'world',        'DeviceMesh world-sized dimension on a new group'),
    ('mesh_dp',                                       'dp',           'torchtitan dp = dp_replicate × dp_shard'),
    ('mesh_batch',                                    'dp',           'torchtitan batch = dp_replicate × dp_shard'),
    ('mesh_dp_replicate',                             'dp_replicate', 'torchtitan'),
    ('mesh_dp_shard',                                 'dp_shard',     'torchtitan'),
    ('mesh_dp_shard_cp',                              'dp_shard×cp',  'torchtitan'),
    ('mesh_fsdp',                                     'dp_shard×cp',  'torchtitan'),
    ('mesh_dp_cp',                                    'dp×cp',        'torchtitan'),
    ('mesh_loss',                                     'dp×cp',        'torchtitan'),
    ('mesh_tp',                                       'tp',           'torchtitan / DeviceMesh'),
    ('mesh_pp',                                       'pp',           'torchtitan / DeviceMesh'),
    ('mesh_cp',                                       'cp',           'torchtitan / DeviceMesh'),
    ('mesh_ep',                                       'ep',           'torchtitan'),
    ('mesh_etp',                                      'etp',          'torchtitan'),
    ('mesh_efsdp',                                    'edp',          'torchtitan'),
    ('mesh_dp_shard_in_ep',                           'edp',          'torchtitan'),
    ('mesh_dp_shard_mod_ep',                          'edp',          'torchtitan'),
    ('DATA_PARALLEL_GROUP',                           'dp',           'Megatron-LM'),
    ('DATA_PARALLEL_GROUP_GLOO',                      'dp',           'Megatron-LM'),
    ('DATA_PARALLEL_GROUP_WITH_CP',                   'dp×cp',        'Megatron-LM'),
    ('DATA_PARALLEL_GROUP_WITH_CP_GLOO',              'dp×cp',        'Megatron-LM'),
    ('INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP',     'part of dp×cp', 'Megatron-LM'),
    ('INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO', 'part of dp×cp', 'Megatron-LM'),
    ('INTER_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP',     'part of dp×cp', 'Megatron-LM'),
    ('CONTEXT_PARALLEL_GROUP',                        'cp',           'Megatron-LM'),
    ('TENSOR_MODEL_PARALLEL_GROUP',                   'tp',           'Megatron-LM'),
    ('PIPELINE_MODEL_PARALLEL_GROUP',                 'pp',           'Megatron-LM'),
    ('MODEL_PARALLEL_GROUP',                          'tp×pp',        'Megatron-LM'),
    ('EMBEDDING_GROUP',                               'embedding',    'Megatron-LM (first and last pipeline stage)'),
    ('POSITION_EMBEDDING_GROUP',                      'embedding',    'Megatron-LM'),
    ('TENSOR_AND_DATA_PARALLEL_GROUP',                'tp×dp',        'Megatron-LM'),
    ('TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP',        'tp×dp×cp',     'Megatron-LM'),
    ('TENSOR_AND_CONTEXT_PARALLEL_GROUP',             'tp×cp',        'Megatron-LM'),
    ('EXPERT_MODEL_PARALLEL_GROUP',                   'ep',           'Megatron-LM'),
    ('EXPERT_TENSOR_PARALLEL_GROUP',                  'etp',          'Megatron-LM'),
    ('EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP',        'etp×ep',       'Megatron-LM'),
    ('EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP',   'etp×ep×pp',    'Megatron-LM'),
    ('EXPERT_DATA_PARALLEL_GROUP',                    'edp',          'Megatron-LM'),
    ('EXPERT_DATA_PARALLEL_GROUP_GLOO',               'edp',          'Megatron-LM')
) AS t(pg_desc, measures, source)
