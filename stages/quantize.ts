import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('quantize', 'Quantize the checkpoint to ternary codes and scales (interchange format)', 'issue 3');
