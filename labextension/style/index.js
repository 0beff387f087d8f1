import './base.css';
import './sweeps.css';
