import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('python-env', 'Build the Python workers' virtual environment from a pinned requirements file', 'issue 2');
