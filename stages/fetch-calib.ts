import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('fetch-calib', 'Tokenise declared calibration/held-out sources and write the data manifest', 'issue 4');
