/**
 * Cell templates inserted by the "Insert %%<magic> cell" commands.
 * The magic flags follow kf_jupyter.magics; keep them in sync.
 */

export interface ICellTemplate {
  /** Magic name without %%. */
  magic: string;
  /** Label in the palette / toolbar. */
  label: string;
  framework: string;
  source: string;
}

const FOOTER = '# Add --backend kubernetes to run the same cell on a Kubeflow Trainer cluster.\n';

export const CELL_TEMPLATES: ICellTemplate[] = [
  {
    magic: 'torchtrain',
    label: 'Insert %%torchtrain cell',
    framework: 'torch',
    source:
      '%%torchtrain -n 1 -p 2\n' +
      FOOTER +
      'import torch.distributed as dist\n' +
      'import kf_jupyter\n\n' +
      'dist.init_process_group(backend="gloo")\n' +
      'rank, world = dist.get_rank(), dist.get_world_size()\n' +
      'for step in range(10):\n' +
      '    kf_jupyter.report(step=step, progress=(step + 1) / 10, loss=1.0 / (step + 1))\n' +
      'print(f"rank {rank} of {world} done")\n' +
      'dist.destroy_process_group()\n'
  },
  {
    magic: 'mpitrain',
    label: 'Insert %%mpitrain cell',
    framework: 'mpi',
    source:
      '%%mpitrain -n 1 -p 2\n' +
      FOOTER +
      'from mpi4py import MPI\n\n' +
      'comm = MPI.COMM_WORLD\n' +
      'total = comm.allreduce(comm.Get_rank(), op=MPI.SUM)\n' +
      'print(f"rank {comm.Get_rank()} of {comm.Get_size()}: sum of ranks = {total}")\n'
  },
  {
    magic: 'jaxtrain',
    label: 'Insert %%jaxtrain cell',
    framework: 'jax',
    source:
      '%%jaxtrain -n 2\n' +
      FOOTER +
      'import jax\n\n' +
      'print(f"process {jax.process_index()} of {jax.process_count()}, devices: {jax.devices()}")\n'
  },
  {
    magic: 'xgboosttrain',
    label: 'Insert %%xgboosttrain cell',
    framework: 'xgboost',
    source:
      '%%xgboosttrain -n 2\n' +
      FOOTER +
      'import numpy as np\n' +
      'import xgboost as xgb\n\n' +
      'rng = np.random.default_rng(0)\n' +
      'X, y = rng.normal(size=(1000, 8)), rng.integers(0, 2, 1000)\n' +
      'booster = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(X, label=y), num_boost_round=10)\n' +
      'print("trained", booster.num_boosted_rounds(), "rounds")\n'
  }
];

export function templateFor(magic: string): ICellTemplate | undefined {
  return CELL_TEMPLATES.find(t => t.magic === magic);
}
