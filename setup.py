from setuptools import find_packages, setup


def read_version():
    namespace = {}
    with open('mmdet3d_ddp_guard/version.py') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


setup(
    name='mmdet3d_ddp_guard',
    version=read_version(),
    description='Multi-GPU training of MMDetection3D models that never dies of '
    'unused parameters: a guarded DDP wrapper and an unused-parameter hook.',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('tests', 'tests.*')),
    python_requires='>=3.8',
    # The core (wrapper, hook, tools) needs only torch and mmengine. torch>=2.1 for
    # Tensor.register_post_accumulate_grad_hook; the upper bound is the newest torch the
    # private reducer APIs were checked on (see mmdet3d_ddp_guard/torch_compat.py).
    install_requires=['torch>=2.1,<2.14', 'mmengine>=0.10,<0.11'],
    extras_require={
        # The real 3D stack, for the examples, the check command on mmdet3d configs and the
        # end-to-end tests. mmcv must be built with its C++ ops: see tools/make_venv.sh.
        'mmdet3d': ['mmcv>=2.0.0rc4,<2.2.0', 'mmdet>=3.0,<3.4', 'mmdet3d>=1.1,<1.5'],
        'tests': ['pytest', 'pytest-timeout'],
    },
    entry_points={
        'console_scripts': [
            'mmdet3d-ddp-guard=mmdet3d_ddp_guard.__main__:main',
        ],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
    ],
    license='Apache License 2.0',
)
