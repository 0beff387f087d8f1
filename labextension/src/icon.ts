import { LabIcon } from '@jupyterlab/ui-components';

import trainerSvg from '../style/icons/kubeflow-trainer.svg';

export const trainerIcon = new LabIcon({
  name: 'kf-jupyter:trainer',
  svgstr: trainerSvg
});
